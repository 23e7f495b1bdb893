"""Toxicity on the researcher's own texts (issue 48, item 1): any texts table, from an empty folder.

A 30-row table of texts labelled "toxic" / "non-toxic" — as CSV (comma, or a French spreadsheet's semicolons in cp1252,
or with a byte-order mark), TSV, parquet, JSON Lines or JSON records, with and without identity columns — is read with
`-p dataset my.csv -p text_col text -p label_col label -p positive_label toxic`, gets a card naming the file (name,
rows, SHA-256, "licence: not given") and nothing of ToxiGen; every file and column mistake is found by
`toxicity_input_problems` without a model, all at once, and a path typo says "no such file" with the folder. The one
table reader also takes a `;`-separated labels.csv. Two reports are rendered, the cheapest the template allows (the
tiny random GPT-2, the seed framing, no Integrated Gradients): the CSV through `acrb-report`, the parquet with identity
groups through papermill.
"""
import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
       "MPLBACKEND": "Agg", "ACRB_PROGRESS": "0"}
CHEAP = ["-p", "model", "tiny-gpt2", "-p", "select", "False", "-p", "ig_rows", "0"]  # seconds, not minutes
OWN = {"dataset": "my.csv", "text_col": "text", "label_col": "label", "positive_label": "toxic"}

TOXIC = ["you are a disgusting idiot", "I hate people like you", "shut up, you worthless fool",
         "go back where you came from, scum", "nobody wants you here, loser"]
BENIGN = ["thanks for the helpful answer", "what a lovely photo of the café", "I agree with your point; well said",
          "have a great weekend", "this recipe is delicious"]


def texts_table() -> pd.DataFrame:
    "30 texts, 15 labelled 'toxic' and 15 'non-toxic', with a group name and a 0/1 identity column."
    rows = [{"text": f"{(TOXIC if i % 2 else BENIGN)[i // 2 % 5]} (#{i})", "label": "toxic" if i % 2 else "non-toxic",
             "group": ["muslims", "jews", "women"][i % 3], "female": int(i % 3 == 2)} for i in range(30)]
    return pd.DataFrame(rows)


SAVERS = {  # file name -> how a researcher's tool saves the table
    "my.csv": lambda d, f: d.to_csv(f, index=False),
    "excel_fr.csv": lambda d, f: d.to_csv(f, index=False, sep=";", encoding="cp1252"),
    "bom.csv": lambda d, f: d.to_csv(f, index=False, encoding="utf-8-sig"),
    "my.tsv": lambda d, f: d.to_csv(f, index=False, sep="\t"),
    "my.parquet": lambda d, f: d.to_parquet(f, index=False),
    "my.jsonl": lambda d, f: d.to_json(f, orient="records", lines=True, force_ascii=False),
    "records.json": lambda d, f: d.to_json(f, orient="records", force_ascii=False),
    "my.csv.gz": lambda d, f: d.to_csv(f, index=False),
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    "An empty folder holding only the researcher's files."
    d = tmp_path_factory.mktemp("own_texts")
    df = texts_table()
    for name, save in SAVERS.items(): save(df, d / name)
    df.assign(label="toxic").to_csv(d / "all_toxic.csv", index=False)
    df.assign(rating=[1, 2, 3, 4, 5] * 6).to_csv(d / "ratings.csv", index=False)
    (d / "book.xlsx").write_bytes(b"PK\x03\x04")
    return d


@pytest.mark.parametrize("name", list(SAVERS))
def test_every_format_reads_as_the_users_own(folder, name):
    from acrb_nb.core import file_sha256
    from acrb_nb.data import card_markdown, load_toxicity_data, toxicity_input_problems
    params = {**OWN, "dataset": name, "id_cols": "group,female", "dataset_name": "", "license": ""}
    assert toxicity_input_problems(params, folder) == []
    df, card = load_toxicity_data(**params, cwd=folder)
    assert (len(df), int(df.label.sum()), card.rows, card.own) == (30, 15, 30, True)
    assert card.identity_columns == ("group:jews", "group:muslims", "group:women", "female")
    assert card.sha256 == file_sha256(folder / name) and card.license == "not given"
    text = card_markdown(card, df)
    assert f"`{name}`" in text and card.sha256 in text and "**Licence:** not given" in text
    assert "toxigen" not in (text + json.dumps(card.to_dict())).lower()
    assert df.text.str.contains("café").any()  # the encoding was read right (cp1252 in excel_fr.csv)


def test_a_file_in_toxigens_columns_is_the_users_not_toxigens(folder, tmp_path):
    "The issue's case: a file in ToxiGen's columns was credited to ToxiGen (source, licence, label rule, 13 groups)."
    from acrb_nb.data import card_markdown, load_toxicity_data
    rows = json.loads((ROOT / "data" / "toxicity" / "toxigen_200.json").read_text())[:30]
    pd.DataFrame(rows).to_csv(tmp_path / "mine.csv", index=False)
    df, card = load_toxicity_data("mine.csv", label_col="is_toxic", id_cols="target_group", cwd=tmp_path)
    text = card_markdown(card, df) + json.dumps(card.to_dict())
    assert card.own and "ToxiGen" not in text and "CDLA" not in text and "Hartvigsen" not in text
    assert set(card.identity_columns) == {f"target_group:{g}" for g in pd.DataFrame(rows).target_group}
    words = pd.DataFrame(rows).assign(is_toxic=lambda d: d.is_toxic.map({True: "toxic", False: "non-toxic"}))
    words.to_csv(tmp_path / "words.csv", index=False)  # read as ToxiGen only when asked, and words never become 0
    with pytest.raises(ValueError, match="is_toxic of .*words.csv holds \\['non-toxic', 'toxic'\\]"):
        load_toxicity_data("toxigen:words.csv", cwd=tmp_path)


CASES = [  # (what the user got wrong, parameters, every sentence expected in the problems)
    ("path typo", {"dataset": "mytext.csv"}, ["parameter 'dataset': no such file mytext.csv (read from {folder})"]),
    ("shipped name typo", {"dataset": "toxign"}, ["no such file toxign", "did you mean 'toxigen'?"]),
    ("column typo", {"text_col": "txt"}, ["parameter 'text_col': column 'txt' is not in `my.csv`", "did you mean 'text'?"]),
    ("word labels, positive_label left at 1", {"positive_label": 1},
     ["parameter 'label_col'", "holds 'non-toxic', 'toxic'", "positive_label=1 is not among them"]),
    ("positive_label in the wrong case", {"positive_label": "Toxic"}, ["did you mean positive_label='toxic'?"]),
    ("one class only", {"dataset": "all_toxic.csv"}, ["30 row(s) of `all_toxic.csv` are toxic", "needs at least 2 of each"]),
    ("a rating as the label", {"dataset": "ratings.csv", "label_col": "rating"}, ["a rating or a class code is not a binary label"]),
    ("identity column typo", {"id_cols": "gruop"}, ["parameter 'id_cols': column 'gruop' is not in", "did you mean 'group'?"]),
    ("a spreadsheet workbook", {"dataset": "book.xlsx"}, ["save the sheet as CSV"]),
    ("four mistakes at once", {"text_col": "txt", "label_col": "lable", "id_cols": "gruop,femal"},
     ["'txt'", "'lable'", "'gruop'", "'femal'"]),
    ("own-table parameters on a shipped dataset", {"dataset": "toxigen", "license": "CC0"},
     ["positive_label='toxic', license='CC0': for your own table only", "registry's ToxiGen"]),
    ("a registry dataset's files missing", {"dataset": "jigsaw:downloads/train.csv", "text_col": "text", "label_col": "label",
                                            "positive_label": 1}, ["no such file or folder downloads/train.csv"]),
]


@pytest.mark.parametrize("what,change,want", CASES, ids=[c[0] for c in CASES])
def test_every_mistake_found_before_a_model(folder, what, change, want):
    from acrb_nb.data import toxicity_input_problems
    problems = toxicity_input_problems({**OWN, **change}, folder)
    text = "\n".join(problems)
    for w in want: assert w.format(folder=folder.resolve()) in text, (what, problems)
    assert len(problems) == (4 if what == "four mistakes at once" else 1), problems
    assert "unknown dataset" not in text


def test_one_reader_for_the_other_tables(folder, tmp_path):
    "The lead's up-front check for fairness and compare, and a ;-separated labels.csv with its header (was refused)."
    from acrb_nb.labels import check_labels_file
    from acrb_nb.tables import table_problems
    preds = texts_table().assign(pred=[0, 1] * 15, score=0.5)
    preds.to_csv(tmp_path / "preds.csv", sep=";", index=False, encoding="cp1252")
    ok = table_problems("preds.csv", "preds", {"label_col": "label", "pred_col": "pred", "score_col": "score", "id_cols": "group"},
                        positive_label="toxic", label_params=("label_col", "pred_col"), cwd=tmp_path)
    bad = table_problems("preds.csv", "preds", {"pred_cols": ["pred", "prd"], "label_col": "label", "id_cols": []},
                         positive_label=1, label_params=("label_col", "pred_cols"), cwd=tmp_path)
    assert ok == [] and len(bad) == 2 and "did you mean 'pred'?" in bad[0] and "positive_label=1 is not among" in bad[1]
    (tmp_path / "sample.json").write_text("{}")
    (tmp_path / "labels.csv").write_bytes("key;item;human_label\nk1;crème;present\nk2;x;absent\n".encode("cp1252"))
    assert check_labels_file(tmp_path) == tmp_path / "labels.csv"


# ------------------------------------------------------------------------------------------- two rendered reports
def _visible(page: str) -> str:
    "What a reader sees: the page without its CSS, scripts and tags."
    page = re.sub(r"<(style|script)\b.*?</\1>", " ", page, flags=re.S | re.I)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))


def _stderr_outputs(ipynb: Path) -> list:
    "Every stderr stream of an executed notebook: raw library warnings would be there."
    nb = json.loads(ipynb.read_text())
    return ["".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []) if o.get("name") == "stderr"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_report_on_a_csv_of_word_labels_from_an_empty_folder(tmp_path):
    texts_table()[["text", "label"]].to_csv(tmp_path / "my.csv", index=False)
    r = subprocess.run([sys.executable, "-m", "acrb_nb.report", "toxicity", "-p", "dataset", "my.csv", "-p", "text_col", "text",
                        "-p", "label_col", "label", "-p", "positive_label", "toxic", *CHEAP], cwd=tmp_path, env=ENV,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    from acrb_nb.core import file_sha256
    (page,) = (tmp_path / "reports" / "toxicity").glob("*.html")
    seen = _visible(page.read_text())
    for want in ("your table my.csv", "30 in the file; 30 used here, 15 toxic", file_sha256(tmp_path / "my.csv"),
                 "Licence: not given", "label = 1 where label = 'toxic'", "no per-group section"):
        assert want in seen, want
    assert "toxigen" not in seen.lower() and "Per-group toxicity rates" not in seen
    assert seen.count("no per-group section") == 1  # said once
    assert _stderr_outputs(page.with_suffix(".ipynb")) == []


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_report_on_a_parquet_with_identity_groups_via_papermill(tmp_path):
    texts_table().to_parquet(tmp_path / "my.parquet", index=False)
    r = subprocess.run([sys.executable, "-m", "papermill", str(ROOT / "nbs" / "toxicity.ipynb"), "out.ipynb", "-p", "dataset",
                        "my.parquet", "-p", "positive_label", "toxic", "-p", "id_cols", "group", "-p", "dataset_name",
                        "Forum sample", "-p", "license", "CC BY 4.0", *CHEAP], cwd=tmp_path, env=ENV, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    nb = json.loads((tmp_path / "out.ipynb").read_text())
    import html, re
    from nbconvert.filters import markdown2html   # what a reader sees: the Markdown as the report renders it
    md = lambda o: html.unescape(re.sub(r"<[^>]+>", "", markdown2html("".join(o["data"]["text/markdown"]))))
    shown = "\n".join(md(o) if "text/markdown" in o.get("data", {}) else "".join(o.get("data", {}).get("text/plain", o.get("text", "")))
                      for c in nb["cells"] for o in c.get("outputs", []))
    for want in ("your table my.parquet", "“Forum sample”", "Licence: CC BY 4.0", "group:jews, group:muslims, group:women",
                 "Per-group toxicity rates", "-p id_cols group:jews,group:muslims,group:women"):
        assert want in shown, want
    rates = next(o["data"]["text/plain"] for c in nb["cells"] if "corrected_rates" in "".join(c["source"])
                 for o in c.get("outputs", []) if "n_items" in "".join(o.get("data", {}).get("text/plain", "")))
    assert all(g in "".join(rates) for g in ("jews", "muslims", "women", "(all groups)"))
    assert "toxigen" not in shown.lower() and _stderr_outputs(tmp_path / "out.ipynb") == []
