"""Collect the small CNN screen of FedNova's normalisation (proxy-norm.sh, proxy-base.sh) into proxy-normalized.json:
score = mean of each curve's last 6 points (1,000 images), as the other proxy-*.json files."""
import glob, json, os, statistics as st, sys
sys.path.insert(0, '/work/main')
from bench.provenance import provenance
rows = []
for path in sorted(glob.glob('/tmp/pxf/*/summary.json')):
    name = path.split('/')[-2]
    head, seed = name.rsplit('-', 1)
    variant, dist = head.split('-', 1)
    s = json.load(open(path))
    c = [b for _, b in s['curve']]
    rows.append({'run': name, 'variant': variant, 'dist': dist, 'seed': int(seed),
                 'last6_mean_accuracy': round(st.mean(c[-6:]), 4), 'final_accuracy': s['final_accuracy'],
                 'iterations': [w['iterations'] for w in s['workers']],
                 'command': ['python' if a.endswith('python') else a for a in s['sim']['command']]})
cells = {}
for r in rows:
    cells.setdefault((r['variant'], r['dist']), []).append(r['last6_mean_accuracy'])
summary = [{'variant': v, 'dist': d, 'seeds': len(a), 'mean_of_last6': round(st.mean(a), 4), 'per_seed': a}
           for (v, d), a in sorted(cells.items())]
doc = {'experiment': 'heterogeneity-explore: small CNN screen of --aggregation normalized (FedNova) at 10x '
                     '(4 devices, 30 virtual s, lr 0.03, 1,000-image curve)',
       'variants': {'paper': '--sync esync', 'pnorm': '--sync esync --aggregation normalized',
                    'lm': 'the recommended configuration (--round-deadline 8 --round-length 8 --late-memory)',
                    'rnorm': 'the recommended configuration with --aggregation normalized', 'sync': '--sync sync'},
       'provenance': provenance(['bash', 'proxy-norm.sh', '&&', 'bash', 'proxy-base.sh', '&&', 'python',
                                 'collect_norm.py'], seeds={1, 2, 3}),
       'summary': summary, 'runs': rows}
if len(sys.argv) > 1:
    json.dump(doc, open(sys.argv[1], 'w'), indent=1)
for s_ in summary:
    print('%-6s %-8s %.3f %s' % (s_['variant'], s_['dist'], s_['mean_of_last6'], s_['per_seed']))
