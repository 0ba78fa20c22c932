"""Collect the smallcnn proxy runs (/work/runs/proxy, made by proxy.sh) into proxy-smallcnn.json with provenance."""
import glob, json, os, statistics as st, sys
sys.path.insert(0, '/work/main')
from bench.provenance import provenance
OUT = '/work/main/bench/results/heterogeneity-explore'
VARIANTS = {'paper': 'the paper\'s ESync', 'dl8': 'the candidate (--round-deadline 8 --round-length 8)',
            'mifa': 'the candidate + MXHET_MIFA=1 (every round the mean over all N devices of each one\'s latest delta)',
            'm2': 'the candidate + MXHET_MIFA=2 (members keep their shares; an absent device\'s latest delta at 1/N)'}
rows = []
for path in sorted(glob.glob('/work/runs/proxy/*/summary.json')):
    name = path.split('/')[-2]
    parts = name.split('-')
    s = json.load(open(path))
    c = [b for _, b in s['curve']]
    rows.append({'run': name, 'variant': parts[0], 'dist': '-'.join(parts[1:-1]), 'seed': int(parts[-1]),
                 'last6_mean_accuracy': round(st.mean(c[-6:]), 4), 'final_accuracy': s['final_accuracy'],
                 'curve': [[round(a, 3), b] for a, b in s['curve']],
                 'command': ['python' if a.endswith('python') else a for a in s['sim']['command']]})
cells = {}
for r in rows:
    cells.setdefault((r['variant'], r['dist']), []).append(r['last6_mean_accuracy'])
summary = [{'variant': v, 'dist': d, 'what': VARIANTS[v], 'seeds': len(a), 'mean_of_last6': round(st.mean(a), 4),
            'per_seed': a} for (v, d), a in sorted(cells.items())]
doc = {'experiment': 'heterogeneity-explore proxy (smallcnn, 10x, 30 virtual s, lr 0.03, 1,000-image curve)',
       'code': '/work/snap/mifa = main at dd98f50 + patches/mifa-prototype.diff; MXHET_MIFA per variant (0 for paper, dl8)',
       'provenance': provenance(['bash', 'proxy.sh', '&&', 'python', 'collect_proxy.py'], seeds={1, 2, 3}),
       'summary': summary, 'runs': rows}
json.dump(doc, open(os.path.join(OUT, 'proxy-smallcnn.json'), 'w'), indent=1)
for s_ in summary:
    print('%-6s %-8s %.3f %s' % (s_['variant'], s_['dist'], s_['mean_of_last6'], s_['per_seed']))
