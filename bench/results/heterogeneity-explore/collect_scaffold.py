"""Collect the small CNN screens of a SCAFFOLD prototype (proxy-scaffold.sh) and of Sync over all four devices
(proxy-sync.sh), at 10x, into proxy-scaffold.json with provenance. Score: the mean of each curve's last 6 points
(1,000 images), as proxy-smallcnn.json and proxy-memory.json (whose lm, dl8 and paper rows they compare with)."""
import glob, json, os, statistics as st, sys
sys.path.insert(0, '/work/main')
from bench.provenance import provenance
OUT = '/work/main/bench/results/heterogeneity-explore'
VARIANTS = {'sync': ('Sync over all four devices', 'main at 6213fec'),
            'sclm': ('lm + MXHET_SCAFFOLD=1 (option II, every device corrects)',
                     '6213fec + patches/scaffold-prototype.diff'),
            'sc': ('dl8 + MXHET_SCAFFOLD=1', '6213fec + patches/scaffold-prototype.diff'),
            'scAlm': ('lm + MXHET_SCAFFOLD=1A (the one-step late devices do not correct; their control variate is '
                      'their gradient)', '6213fec + patches/scaffold-prototype.diff'),
            'scABlm': ('lm + MXHET_SCAFFOLD=1AB (as 1A, every control variate an EMA at 0.75)',
                       '6213fec + patches/scaffold-prototype.diff')}
rows = []
for path in sorted(glob.glob('/tmp/pxs/*/summary.json')):
    name = path.split('/')[-2]
    head, seed = name.rsplit('-', 1)
    variant, dist = head.split('-', 1)
    s = json.load(open(path))
    c = [b for _, b in s['curve']]
    rows.append({'run': name, 'profile': '10x', 'variant': variant, 'dist': dist, 'seed': int(seed),
                 'last6_mean_accuracy': round(st.mean(c[-6:]), 4), 'final_accuracy': s['final_accuracy'],
                 'code': VARIANTS[variant][1],
                 'command': ['python' if a.endswith('python') else a for a in s['sim']['command']]})
cells = {}
for r in rows:
    cells.setdefault((r['variant'], r['dist']), []).append(r['last6_mean_accuracy'])
summary = [{'profile': '10x', 'variant': v, 'what': VARIANTS[v][0], 'dist': d, 'seeds': len(a),
            'mean_of_last6': round(st.mean(a), 4), 'per_seed': a} for (v, d), a in sorted(cells.items())]
doc = {'experiment': 'heterogeneity-explore: small CNN screens of a SCAFFOLD prototype (drift correction) and of '
                     'Sync, 10x (slowdowns 10,10,1,1), lr 0.03, 30 virtual s, 1,000-image curve',
       'provenance': provenance(['bash', 'proxy-sync.sh', '&&', 'bash', 'proxy-scaffold.sh', '&&', 'python',
                                 'collect_scaffold.py'], seeds={1, 2, 3}),
       'summary': summary, 'runs': rows}
json.dump(doc, open(os.path.join(OUT, 'proxy-scaffold.json'), 'w'), indent=1)
for s_ in summary:
    print('%-7s %-8s %.3f %s' % (s_['variant'], s_['dist'], s_['mean_of_last6'], s_['per_seed']))
