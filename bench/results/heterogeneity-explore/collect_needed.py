"""Collect the small CNN screens of the "needed device" prototype (proxy-needed.sh: 10x; proxy-needed-117x.sh: the
paper's 117x profile) into proxy-needed.json with provenance. Score: the mean of each curve's last 6 points (1,000
images), as proxy-memory.json, whose lm (the recommended configuration), dl8 and paper rows they compare with."""
import glob, json, os, statistics as st, sys
sys.path.insert(0, '/work/main')
from bench.provenance import provenance
OUT = '/work/main/bench/results/heterogeneity-explore'
CODE = '1b4a5e1 + patches/needed-prototype.diff (/work/snap/need)'
rows = []
for base, profile in (('/tmp/pxn', '10x'), ('/tmp/pxn117', '117x')):
    for path in sorted(glob.glob(base + '/*/summary.json')):
        name = path.split('/')[-2]
        head, seed = name.rsplit('-', 1)
        variant, dist = head.split('-', 1)
        s = json.load(open(path))
        c = [b for _, b in s['curve']]
        rows.append({'run': name, 'profile': profile, 'variant': variant, 'dist': dist, 'seed': int(seed),
                     'last6_mean_accuracy': round(st.mean(c[-6:]), 4), 'final_accuracy': s['final_accuracy'],
                     'iterations': [w['iterations'] for w in s['workers']],
                     'late_memory_pushes': [(w.get('late_memory') or {}).get('pushes') for w in s['workers']],
                     'code': CODE, 'command': ['python' if a.endswith('python') else a for a in s['sim']['command']]})
# ResNet-18 at 10x, made by need.sh (see README): label-sorted GroupNorm 120 s and i.i.d. BatchNorm 60 s, seed 0
resnet = []
for name in ('gn-need2-10x-lr0.03', 'need2-10x-lr0.03'):
    run_dir = '/work/runs/explore/' + name
    s = json.load(open(os.path.join(run_dir, 'summary.json')))
    conf = os.path.join(run_dir, 'confirmation.json')
    resnet.append({'run': name, 'profile': '10x', 'variant': 'need2.0', 'final_accuracy': s['final_accuracy'],
                   'curve': s['curve'], 'iterations': [w['iterations'] for w in s['workers']],
                   'late_memory_pushes': [(w.get('late_memory') or {}).get('pushes') for w in s['workers']],
                   'final_model_sha256': s['workers'][0]['final_model_sha256'],
                   'confirmed_time_to_target_s': json.load(open(conf))['time_to_target_s'] if os.path.exists(conf)
                   else None, 'code': CODE,
                   'command': ['python' if a.endswith('python') else a for a in s['sim']['command']]})
cells = {}
for r in rows:
    cells.setdefault((r['profile'], r['variant'], r['dist']), []).append(r['last6_mean_accuracy'])
summary = [{'profile': p, 'variant': v, 'dist': d, 'seeds': len(a), 'mean_of_last6': round(st.mean(a), 4),
            'per_seed': a} for (p, v, d), a in sorted(cells.items())]
doc = {'experiment': 'heterogeneity-explore: small CNN screens of the needed-device prototype (lr 0.03, 1,000-image '
                     'curve; 10x: 4 devices, 30 virtual s; 117x: 6 devices, 60 virtual s)',
       'variants': {'need1.5': 'lm + MXHET_NEED=1.5', 'need2.0': 'lm + MXHET_NEED=2.0 (a device whose EMA loss on '
                    'the global model it just took is above 2x the lowest device\'s is waited for, deadline or not)'},
       'provenance': provenance(['bash', 'proxy-needed.sh', '&&', 'bash', 'proxy-needed-117x.sh', '&&', 'bash',
                                 'need.sh', '&&', 'python',
                                 'collect_needed.py'], seeds={1, 2, 3}),
       'summary': summary, 'runs': rows, 'resnet18_runs': resnet}
json.dump(doc, open(os.path.join(OUT, 'proxy-needed.json'), 'w'), indent=1)
for s_ in summary:
    print('%-5s %-8s %-8s %.3f %s' % (s_['profile'], s_['variant'], s_['dist'], s_['mean_of_last6'], s_['per_seed']))
