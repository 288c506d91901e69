"""Cross-validated (3 folds by episode) gradient-boosted regressors of the all-knob advantages of
``issue21_adv10b_cli.py label`` (issue 21, tenth session b): does a non-linear model find conditional gains
the MLP misses? Prints and writes the first-order gain of acting on the held-out predictions per margin.

    .venv/bin/python benchmarks/issue21_adv10b_gbm_cv.py ray_results/adv10b_labels benchmarks/results/issue21/adv10b_gbm_cv.json
"""
import json
import sys

import numpy as np

sys.path.insert(0, 'benchmarks')
sys.path.insert(0, '.')
from pathlib import Path
from sklearn.ensemble import HistGradientBoostingRegressor
from issue21_adv10b_allknob import load
rep = []
for name, dirs in (("4-cand", [Path(sys.argv[1])]),):
    d=load(dirs); x,y,ep,act=d['x'],d['y'],d['ep'],d['act']; n_ep=len(np.unique(ep))
    yc=np.clip(y,-1,1); folds=ep%3; preds=np.zeros_like(y)
    for k in range(3):
        for c in range(y.shape[1]):
            m=HistGradientBoostingRegressor(max_iter=150, learning_rate=0.05, max_leaf_nodes=15, min_samples_leaf=40, random_state=0)
            m.fit(x[folds!=k], yc[folds!=k,c]); preds[folds==k,c]=m.predict(x[folds==k])
    off=np.ones_like(y,bool); off[np.arange(len(y)),act]=False
    pm=np.where(off,preds,-np.inf); best=pm.argmax(1); gain=pm[np.arange(len(y)),best]
    rep.append(f"{n_ep} episodes, corr {np.corrcoef(preds[off], y[off])[0, 1]:+.3f}")
    print(rep[-1])
    for mg in (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.6):
        s=gain>mg; rep.append(f"  m{mg}: switch {s.mean():.1%} gain/ep {y[s,best[s]].sum()/n_ep:+.3f} (~{y[s,best[s]].sum()/n_ep*2/200:+.4f} grade)"); print(rep[-1])
json.dump({"command": "benchmarks/issue21_adv10b_gbm_cv.py " + " ".join(sys.argv[1:]), "cross_validation": rep},
          open(sys.argv[2], "w"), indent=1)


if len(sys.argv) > 3:  # fit on every episode and pickle (a file this project wrote): spec gbm:PATH@MARGIN
    import pickle

    full = []
    for c in range(y.shape[1]):
        m = HistGradientBoostingRegressor(max_iter=150, learning_rate=0.05, max_leaf_nodes=15, min_samples_leaf=40,
                                          random_state=0)
        m.fit(x, yc[:, c])
        full.append(m)
    with open(sys.argv[3], "wb") as fh:
        pickle.dump(full, fh)
    print(f"wrote {sys.argv[3]}")
