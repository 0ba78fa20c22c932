"""Collect the small CNN screens of --late-memory (proxy-memory.sh: 10x; proxy-117x.sh: the paper's 117x profile;
proxy-memshare.sh: each memory at the on-time members' share, a patch in /work/snap/lmx only) into
proxy-memory.json with provenance. Score: the mean of each curve's last 6 points (1,000 images), as proxy-smallcnn.json."""
import glob, json, os, statistics as st, sys
sys.path.insert(0, '/work/main')
from bench.provenance import provenance
OUT = '/work/main/bench/results/heterogeneity-explore'
SOURCES = {'/tmp/pxm': ('10x', 'main at 4aabe7c (/work/snap/lm)'),
           '/tmp/px117': ('117x', 'main at 4aabe7c (/work/snap/lm)'),
           '/tmp/pxv': ('10x', '4aabe7c with MXHET_MEMSHARE=ontime read by Membership.memory_share (/work/snap/lmx; '
                               'd12: 4aabe7c unpatched)')}
rows = []
for base, (profile, code) in SOURCES.items():
    for path in sorted(glob.glob(base + '/*/summary.json')):
        name = path.split('/')[-2]
        parts = name.split('-')
        s = json.load(open(path))
        c = [b for _, b in s['curve']]
        rows.append({'run': name, 'profile': profile, 'variant': parts[0], 'dist': '-'.join(parts[1:-1]),
                     'seed': int(parts[-1]), 'last6_mean_accuracy': round(st.mean(c[-6:]), 4),
                     'final_accuracy': s['final_accuracy'], 'code': code,
                     'command': ['python' if a.endswith('python') else a for a in s['sim']['command']]})
cells = {}
for r in rows:
    cells.setdefault((r['profile'], r['variant'], r['dist']), []).append(r['last6_mean_accuracy'])
summary = [{'profile': p, 'variant': v, 'dist': d, 'seeds': len(a), 'mean_of_last6': round(st.mean(a), 4), 'per_seed': a}
           for (p, v, d), a in sorted(cells.items())]
doc = {'experiment': 'heterogeneity-explore: small CNN screens of --late-memory (lr 0.03, 1,000-image curve; 10x: 4 '
                     'devices, 30 virtual s; 117x: 6 devices, 60 virtual s)',
       'variants': {'lm': '--round-deadline 8 --round-length 8 --late-memory', 'dl8': '--round-deadline 8 --round-length 8',
                    'paper': 'no options', 'ontime': 'lm, each memory at 1/(on-time members)',
                    'd12': '--round-deadline 12 --round-length 8 (nobody late at 10x)'},
       'provenance': provenance(['bash', 'proxy-memory.sh', 'proxy-117x.sh', 'proxy-memshare.sh', '&&', 'python',
                                 'collect_memory.py'], seeds={1, 2, 3}),
       'summary': summary, 'runs': rows}
json.dump(doc, open(os.path.join(OUT, 'proxy-memory.json'), 'w'), indent=1)
for s_ in summary:
    print('%-5s %-7s %-8s %.3f %s' % (s_['profile'], s_['variant'], s_['dist'], s_['mean_of_last6'], s_['per_seed']))
