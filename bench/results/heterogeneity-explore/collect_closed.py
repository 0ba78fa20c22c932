"""Collect the closed-division screens (closed-lr0.001.sh: ESync's recommended configuration at the paper's lr 0.001,
117x, ResNet-18, seed 0, 40 virtual s; confirmed with bench.confirm) into closed-lr0.001.json with provenance, beside
the committed closed runs of the alternatives on the same grid (bench/results/paper-sim-closed/runs)."""
import json, os, sys
sys.path.insert(0, '/work/main')
from bench.provenance import provenance
OUT = '/work/main/bench/results/heterogeneity-explore'
CLOSED = '/work/main/bench/results/paper-sim-closed/runs'
REC = '--round-deadline 8 --round-length 8 --late-memory'
OLD = 'main at fc4a5d2 (the simulator of 339dd2b)'
# 2bed2e5's simulator takes the mean of BatchNorm statistics whatever --global-lr (1771dfa); training never reads
# them and every score recomputes them, so rec-g4's run would be the same on it
NEW = 'main at 46058b0 (the simulator of 2bed2e5)'
VARIANTS = {'rec': (REC, OLD), 'rec-g4': (REC + ' --global-lr 4', OLD),
            'rec-g2': (REC + ' --global-lr 2', NEW), 'rec-g3': (REC + ' --global-lr 3', NEW)}
rows = []
for name, (flags, code) in VARIANTS.items():
    base = '/work/runs/x001/' + name
    s, c = json.load(open(base + '/summary.json')), json.load(open(base + '/confirmation.json'))
    rows.append({'run': name, 'flags': flags, 'curve': s['curve'], 'confirmed_time_to_target_s': c['time_to_target_s'],
                 'candidates': c['candidates'], 'final_accuracy': s['final_accuracy'],
                 'iterations': {w['slot']: w['iterations'] for w in s['workers']},
                 'rounds': s['workers'][-1]['rounds'], 'wall_s': s['sim']['wall_s'], 'cpu_s': s['sim']['cpu_s'],
                 'code': code,
                 'command': ['python' if a.endswith('python') else a for a in s['sim']['command']]})
for name in ('resnet18_v1-esync-iid', 'resnet18_v1-async-iid', 'resnet18_v1-dcasgd-iid', 'resnet18_v1-local-iid'):
    s = json.load(open(os.path.join(CLOSED, name, 'summary.json')))
    c = json.load(open(os.path.join(CLOSED, name, 'confirmation.json')))
    rows.append({'run': name, 'committed_in': 'bench/results/paper-sim-closed', 'curve': s['curve'][:8],
                 'confirmed_time_to_target_s': c['time_to_target_s'], 'final_accuracy': s['final_accuracy']})
doc = {'experiment': "heterogeneity-explore: ESync's recommended configuration in the closed division (lr 0.001, "
                     '117x: 117,117,1,1,1,1, ResNet-18, batch 64, seed 0, 40 virtual s, the closed grid); the committed '
                     'closed runs after it ran to 1,080 s (their first 8 curve points, their final accuracy at 1,080 s)',
       'provenance': provenance(['bash', 'closed-lr0.001.sh', '&&', 'python', 'collect_closed.py'], seeds={0}),
       'runs': rows}
json.dump(doc, open(os.path.join(OUT, 'closed-lr0.001.json'), 'w'), indent=1)
for r in rows:
    print('%-26s confirmed %-7s final %.4f' % (r['run'], r['confirmed_time_to_target_s'], r['final_accuracy']))
