"""Collect /work/runs/explore/* into bench/results/heterogeneity-explore/explore.json (with provenance)."""
import glob, json, os, sys
sys.path.insert(0, '/work/main')
from bench.provenance import provenance
OUT = '/work/main/bench/results/heterogeneity-explore'
rows = []
# the code each run was made by, where it is not main's at the time (the README's text says which commits)
LS = '0f6910a (--late-scale steps, reverted in 05ee3a8; for the other flags the simulator of efe8950)'
V3 = ('0f6910a with patches/late-share-env.diff and MXHET_LATE_NORM=ontime MXHET_LATE_A=one: a late delta weighs 1 '
      '(no staleness discount) and every share is over the on-time members\' weights only (late share 1/2 here)')
MIFA = 'dd98f50 with patches/mifa-prototype.diff and MXHET_MIFA=1: every round the mean over all N devices of each one\'s latest delta'
M2 = ('dd98f50 with patches/mifa-prototype.diff and MXHET_MIFA=2: the round\'s members keep their shares; each absent '
      'device\'s latest delta added at 1/N')
LM = '4aabe7c (esync --late-memory as built: the late device pushes its delta to its memory keys, the keeper pulls it once per version, over the link model)'
MIFA0 = 'dd98f50 with patches/mifa-prototype.diff, MXHET_MIFA unset (the patch inactive: dd98f50\'s simulator)'
CODE = {'gn-lm-10x-lr0.03': LM, 'gn-lm-10x-lr0.03-seed1': LM, 'lm-10x-lr0.03': LM,
        'gn-dl8-10x-lr0.03-seed1': MIFA0, 'gn-paper10x-lr0.03-seed1': MIFA0,
        'gn-dl8mifa-10x-lr0.03': MIFA, 'dl8mifa-10x-lr0.03': MIFA, 'gn-dl8m2-10x-lr0.03': M2, 'gn-dl8m2-10x-lr0.03-seed1': M2, 'dl8m2-10x-lr0.03': M2,
        'gn-dl8ls-10x-lr0.03': LS, 'dl8ls-10x-lr0.03': LS, 'gn-sync10x-lr0.03': LS, 'gn-async10x-lr0.03': LS,
        'gn-dl8-10x-lr0.015': LS, 'gn-dl8-10x-lr0.01': LS, 'gn-dl8v3-10x-lr0.03': V3, 'dl8v3-10x-lr0.03': V3}
for path in sorted(glob.glob('/work/runs/explore/*/summary.json')):
    d = os.path.dirname(path); name = os.path.basename(d)
    s = json.load(open(path))
    cmd = s['sim']['command']
    conf = json.load(open(os.path.join(d, 'confirmation.json'))) if os.path.exists(os.path.join(d, 'confirmation.json')) else None
    slow = [w['slowdown'] for w in s['workers']]
    i = cmd.index('--lr')
    extra = cmd[cmd.index('--metrics-out') + 2:] if '--metrics-out' in cmd else []
    extra = [a for a in cmd[cmd.index('--eval-samples') + 2:]] if '--eval-samples' in cmd else extra
    rows.append({
        'run': name, 'mode': s['mode'], 'slowdowns': slow, 'profile': int(max(slow)), 'lr': s['lr'], 'seed': s['seed'],
        'extra_args': [a for j, a in enumerate(extra) if a != '--metrics-out' and (j == 0 or extra[j - 1] != '--metrics-out')],
        'budget_s': float(cmd[cmd.index('--time-budget') + 1]),
        'curve_time_to_target_s': s['time_to_target_s'], 'curve_samples': s['evaluation']['curve_samples'],
        'confirmed_time_to_target_s': conf['time_to_target_s'] if conf else None,
        'confirmed_accuracy': conf['accuracy'] if conf else None,
        'final_accuracy': s['final_accuracy'], 'final_samples': s['evaluation']['final_samples'],
        'train_time_s': s['train_time_s'],
        'iterations': [w['iterations'] for w in s['workers']], 'rounds': [w.get('rounds') for w in s['workers']],
        'curve': [[round(p[0], 3), p[1]] for p in s['curve']],
        'wall_s': s['sim']['wall_s'], 'code': CODE.get(name), 'command': ['python' if a.endswith('python') else a for a in cmd],
    })
doc = {'experiment': 'heterogeneity-explore',
       'provenance': provenance(['python', '/work/runs/explore/collect.py (runs made by /work/runs/explore/run.sh)'],
                                seeds={r['seed'] for r in rows}),
       'target_accuracy': 0.8, 'runs': rows}
os.makedirs(OUT, exist_ok=True)
json.dump(doc, open(os.path.join(OUT, 'explore.json'), 'w'), indent=1)
for r in rows:
    print('%-26s %4sx lr %-5g ttt %-7s conf %-7s final %.3f its %s' % (r['run'], r['profile'], r['lr'], r['curve_time_to_target_s'], r['confirmed_time_to_target_s'], r['final_accuracy'], r['iterations']))

# the README's table
lines = ['| run | profile (slowdowns) | mode and flags | lr | time to 0.80, confirmed on 10,000 images (virtual s) | on the 1,000-image curve | accuracy at the budget (10,000 images) | fast device\'s iterations |',
         '|---|---|---|---|---|---|---|---|']
order = sorted(rows, key=lambda r: (r['mode'] != 'local', -r['profile'], r['mode'], ' '.join(r['extra_args']), r['lr']))
for r in order:
    flags = ' '.join(r['extra_args']) or '(none)'
    note = ''
    if r['code'] and 'late-share-env' in r['code']:
        note = ' + patch late-share-env (late weight 1, shares over the on-time members)'
    elif r['code'] and 'MXHET_MIFA=1' in r['code']:
        note = ' + MIFA prototype, MXHET_MIFA=1 (mean of every device\'s latest delta)'
    elif r['code'] and 'MXHET_MIFA=2' in r['code']:
        note = ' + MIFA prototype, MXHET_MIFA=2 (members\' shares; an absent device\'s latest delta at 1/N)'
    elif r['code'] and r['code'].startswith('4aabe7c'):
        note = ' (as built in 4aabe7c)'
    mode = 'standalone' if r['mode'] == 'local' else ('fast-only Sync' if r['profile'] == 1 else 'Sync') if r['mode'] == 'sync' else r['mode']
    lines.append('| %s | %s | %s %s | %g | %s | %s | %.3f | %d |' % (
        r['run'], '%dx (%s)' % (r['profile'], ','.join('%g' % s for s in r['slowdowns'])) if r['profile'] > 1 else '%d device(s) at 1x' % len(r['slowdowns']),
        mode, ('`%s`' % flags if r['extra_args'] else '') + note, r['lr'],
        '**%.1f**' % r['confirmed_time_to_target_s'] if r['confirmed_time_to_target_s'] is not None else 'not reached' if r['curve_time_to_target_s'] is None else 'not run through bench.confirm',
        '%.1f' % r['curve_time_to_target_s'] if r['curve_time_to_target_s'] is not None else 'not reached',
        r['final_accuracy'], max(r['iterations'])))
open('/tmp/explore-table.md', 'w').write('\n'.join(lines) + '\n')
