#!/usr/bin/env python3
"""Write the default predictions of the fairness report: real predictions of a real classifier on real data.

Input : data/toxicity/toxigen_200.json — the 200-item annotated ToxiGen sample (100 toxic / 100 benign, 13 target groups).
Model : alt-profanity-check 1.9.1 (MIT; a TF-IDF + linear SVM toxicity classifier shipped inside the pip package),
        the reference classifier of the toxicity study. score = its predict_prob, pred = its predict (prob > 0.5).
Output: data/fairness/toxigen200.alt-profanity-check.csv with columns
        id, target_group, is_toxic (0/1 label), pred (0/1), score (probability of "offensive"), model.

Deterministic (no randomness; the model is a fixed linear classifier). Run from anywhere:

    .venv/bin/python data/fairness/make_fixture.py

The toxicity study adds the same table for its default zero-shot LLM next to this one.
"""
import importlib.metadata, json
from pathlib import Path
import pandas as pd

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "toxicity" / "toxigen_200.json"

def main():
    from profanity_check import predict, predict_prob
    items = json.loads(SRC.read_text())
    texts = [x["text"] for x in items]
    df = pd.DataFrame({"id": [x["id"] for x in items], "target_group": [x["target_group"] for x in items],
                       "is_toxic": [int(bool(x["is_toxic"])) for x in items],
                       "pred": predict(texts).astype(int), "score": predict_prob(texts).round(6),
                       "model": f"alt-profanity-check=={importlib.metadata.version('alt-profanity-check')}"})
    out = HERE / "toxigen200.alt-profanity-check.csv"
    df.to_csv(out, index=False)
    print(f"wrote {out} ({len(df)} rows; accuracy {(df.pred == df.is_toxic).mean():.3f}, "
          f"positive predictions {df.pred.mean():.3f})")

if __name__ == "__main__":
    main()
