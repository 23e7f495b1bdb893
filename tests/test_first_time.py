"""A new user's first command, by class (issue 48 item 3): every template and command — ACRB, toxicity, fairness, IAT,
compare, view — refuses every mistake up front, in one message, before a kernel starts, a run folder or a report file is
written.

One table of cases; each runs from an empty folder (plus the files the case itself provides: a model folder with no
weights, a sim config with a stray key, …) through the command's own `main` in this process — what is checked is the
message and that nothing new appeared in the folder, neither of which depends on a new process — and asserts that the
command exits with 2, that every expected phrase is in its message and that the folder holds exactly what it held
before. One more case runs the real `acrb-report` as a subprocess on a config file with four mistakes of four kinds and
prints how long the refusal took.
"""
import subprocess
import sys
import time
from pathlib import Path

import pytest

ACRB_SIM_STRAY = "extends: planted_acrb.yaml\ndefualts:\n  p_erase: 0.2\n"
NO_CUES = ("name: mine\nneutral: {subject: a person}\ndimensions:\n  occupation:\n    - value: librarian\n"
           "      subject: a librarian\n      i2i_edit: Make the person a librarian.\n")
NURSE = ("name: mine\nneutral: {subject: a person}\ndimensions:\n  occupation:\n    - value: nurse\n      subject: a nurse\n"
         "      cues: [scrubs]\n      i2i_edit: Make the person a nurse.\n")
NO_SLOT = "prompts:\n  - {id: X1, domain: mine, template: a scene without a slot}\n"
TEXTS = "text;label;grp\nhello there;toxic;a\ngood bye;non-toxic;b\n"   # a ;-separated file: read as it is
PREDS = "y,p,race\n1,0,a\n0,1,b\n"
FOUR = "model: flx\nattributes: [religon]\nn_base_prompt: 3\nimages_per_prompt: two\n"

# (id, command, arguments, files the case provides {path: text; a path ending in / is a folder}, phrases of the message)
CASES = [
    # ACRB: names, with a close match
    ("acrb-attribute", "report", ["acrb", "-p", "attributes", "religon"], {}, ["did you mean 'religion'"]),
    ("acrb-two-attributes", "report", ["acrb", "-p", "attributes", "religon,gendr"], {},
     ["2 problems", "did you mean 'religion'", "did you mean 'gender'"]),
    ("acrb-domain", "report", ["acrb", "-p", "domains", "violense_adjacent"], {}, ["did you mean 'violence_adjacent'"]),
    ("acrb-model", "report", ["acrb", "-p", "model", "flx"], {}, ["did you mean 'flux'"]),
    ("acrb-editor", "report", ["acrb", "-p", "model", "flux", "-p", "mode", "i2i"], {}, ["not a known image_editor"]),
    ("acrb-mode", "report", ["acrb", "-p", "mode", "i2j"], {}, ["did you mean 'i2i'"]),
    ("acrb-judge", "report", ["acrb", "-p", "judge", "clip:clip-vit-b-23"], {}, ["did you mean 'clip-vit-b-32'"]),
    ("acrb-judge2", "report", ["acrb", "-p", "judge2", "nosuchjudge"], {}, ["judge2='nosuchjudge' is not a known vision_judge"]),
    ("acrb-llm", "report", ["acrb", "-p", "llm", "smolm2-135m"], {}, ["did you mean 'smollm2-135m'"]),
    # ACRB: numbers
    ("acrb-n-base-prompts", "report", ["acrb", "-p", "n_base_prompts", "0"], {}, ["n_base_prompts must be an integer ≥ 1"]),
    ("acrb-images", "report", ["acrb", "-p", "images_per_prompt", "0"], {}, ["images_per_prompt must be an integer ≥ 1"]),
    ("acrb-mde", "report", ["acrb", "-p", "mde", "1.5"], {}, ["mde must be a number > 0 and < 1"]),
    ("acrb-n-boot", "report", ["acrb", "-p", "n_boot", "0"], {}, ["n_boot must be an integer ≥ 1"]),
    ("acrb-label-design", "report", ["acrb", "-p", "label_design", "actve"], {}, ["label_design='actve'", "'active'"]),
    ("acrb-min-labels", "report", ["acrb", "-p", "min_labels", "0"], {}, ["min_labels must be an integer ≥ 1"]),
    # ACRB: files
    ("acrb-labels-missing", "report", ["acrb", "-p", "labels", "nothing/labels.csv"], {}, ["does not exist", "read from"]),
    ("acrb-labels-no-sample", "report", ["acrb", "-p", "labels", "lab"], {"lab/labels.csv": "key,human_label\n"},
     ["sample.json is missing"]),
    ("acrb-sim-config-missing", "report", ["acrb", "-p", "sim_config_file", "mine.yaml"], {}, ["mine.yaml does not exist"]),
    ("acrb-sim-config-key", "report", ["acrb", "-p", "sim_config_file", "sim.yaml"], {"sim.yaml": ACRB_SIM_STRAY},
     ["defualts", "at line(s) 2", "did you mean 'defaults'"]),
    ("acrb-attribute-set-missing", "report", ["acrb", "-p", "attribute_set", "mine.yaml"], {}, ["does not exist"]),
    ("acrb-attribute-set-schema", "report", ["acrb", "-p", "attribute_set", "mine.yaml"], {"mine.yaml": NO_CUES},
     ["'cues' is a required property", "(line 5)"]),
    ("acrb-attribute-set-clash", "report", ["acrb", "-p", "attribute_set", "mine.yaml"], {"mine.yaml": NURSE},
     ["its word 'nurse' already appears", "BP_0014", "leave those domains out"]),
    ("acrb-base-prompts", "report", ["acrb", "-p", "base_prompts", "prompts.yaml"], {"prompts.yaml": NO_SLOT},
     ["must contain {subject} exactly once"]),
    ("acrb-source-dir-no-images", "report", ["acrb", "-p", "mode", "i2i", "-p", "source_dir", "faces"],
     {"faces/a.heic": "x", "faces/notes.txt": "y"}, ["holds no image", ".heic", ".txt"]),
    ("acrb-source-dir", "report", ["acrb", "-p", "mode", "i2i", "-p", "source_dir", "faces"], {}, ["no such folder", "faces", "photographs of people"]),
    # ACRB: the parameters themselves
    ("acrb-unknown", "report", ["acrb", "-p", "n_base_prompt", "3"], {}, ["did you mean 'n_base_prompts'", "Its parameters"]),
    ("acrb-type", "report", ["acrb", "-p", "images_per_prompt", "two"], {}, ["expects int"]),
    ("acrb-secret", "report", ["acrb", "-p", "api_key", "abc123"], {}, ["looks like a credential"]),
    ("acrb-execution", "report", ["acrb", "-y", "execution: {executr: ray}"], {}, ["did you mean 'executor'"]),
    ("acrb-config-four", "report", ["acrb", "-f", "four.yaml"], {"four.yaml": FOUR},
     ["4 problems", "line 1", "line 2", "line 3", "line 4"]),
    # toxicity
    ("toxicity-model", "report", ["toxicity", "-p", "model", "smolm2-135m"], {}, ["did you mean 'smollm2-135m'"]),
    ("toxicity-folder-config-only", "report", ["toxicity", "-p", "model", "models/mine"], {"models/mine/config.json": "{}"},
     ["without weights (it holds config.json)"]),
    ("toxicity-task", "report", ["toxicity", "-p", "task", "toxcity"], {}, ["did you mean 'toxicity'"]),
    ("toxicity-cal-frac", "report", ["toxicity", "-p", "cal_frac", "1.5"], {}, ["cal_frac must be a number > 0 and < 1"]),
    ("toxicity-baseline", "report", ["toxicity", "-p", "ig_baseline", "fillr"], {}, ["did you mean 'filler'"]),
    ("toxicity-batch", "report", ["toxicity", "-p", "batch_size", "0"], {}, ["batch_size"]),
    # toxicity: your own texts
    ("toxicity-dataset-typo", "report", ["toxicity", "-p", "dataset", "mytext.csv"], {}, ["no such file mytext.csv", "read from"]),
    ("toxicity-own-columns", "report", ["toxicity", "-p", "dataset", "mine.csv", "-p", "text_col", "txt", "-p", "id_cols", "grup",
                                        "-p", "positive_label", "toxc"], {"mine.csv": TEXTS},
     ["3 problems", "did you mean 'text'", "did you mean 'grp'", "positive_label='toxc' is not among them"]),
    ("toxicity-own-label", "report", ["toxicity", "-p", "dataset", "mine.tsv", "-p", "label_col", "lable"],
     {"mine.tsv": TEXTS.replace(";", "\t")}, ["did you mean 'label'"]),
    # fairness
    ("fairness-preds", "report", ["fairness", "-p", "preds", "data/nothing.csv"], {}, ["no such file", "nothing.csv"]),
    ("fairness-model", "report", ["fairness", "-p", "model", "alt-profanity-chek"], {}, ["did you mean 'alt-profanity-check'"]),
    ("fairness-n-boot", "report", ["fairness", "-p", "n_boot", "7"], {}, ["n_boot must be 0", "or an integer ≥ 50"]),
    ("fairness-group-size", "report", ["fairness", "-p", "min_group_size", "0"], {}, ["min_group_size must be an integer ≥ 1"]),
    ("fairness-threshold", "report", ["fairness", "-p", "threshold", "0.0"], {}, ["threshold must be a number > 0"]),
    ("fairness-own-columns", "report", ["fairness", "-p", "model", "m", "-p", "preds", "p.csv", "-p", "label_col", "yy",
                                        "-p", "pred_col", "p", "-p", "id_cols", "rac"], {"p.csv": PREDS},
     ["2 problems", "did you mean 'y'", "did you mean 'race'"]),
    ("fairness-positive-label", "report", ["fairness", "-p", "model", "m", "-p", "preds", "w.csv", "-p", "label_col", "y",
                                           "-p", "pred_col", "p", "-p", "id_cols", "race", "-p", "positive_label", "yess"],
     {"w.csv": "y,p,race\nyes,yes,a\nno,no,b\n"}, ["positive_label='yess' is not among them"]),
    # IAT
    ("iat-dimension", "report", ["iat", "-p", "dimensions", "gendr"], {}, ["did you mean 'gender'"]),
    ("iat-design", "report", ["iat", "-p", "design", "seeds"], {}, ["did you mean 'seed'"]),
    ("iat-model", "report", ["iat", "-p", "model", "gpt-4o-mini-jduge"], {}, ["did you mean 'gpt-4o-mini-judge'"]),
    ("iat-pairs", "report", ["iat", "-p", "pairs_per_combo", "0"], {}, ["pairs_per_combo must be an integer ≥ 1"]),
    ("iat-words", "report", ["iat", "-p", "words", "mywords.yaml"], {}, ["mywords.yaml does not exist"]),
    ("iat-export-labels", "report", ["iat", "-p", "export_labels", "out"], {}, ["export_labels needs run_dir"]),
    ("iat-alpha", "report", ["iat", "-p", "alpha", "1.5"], {}, ["alpha must lie in (0, 1)"]),
    ("iat-images", "report", ["iat", "-p", "images", "profiles.jsonl"], {}, ["no such file"]),
    # compare
    ("compare-one-run", "report", ["compare", "runs/a"], {"runs/a/spec.json": '{"study": "acrb", "model": "sim"}'},
     ["two or more runs"]),
    ("compare-no-run", "report", ["compare", "runs/a", "runs/b"], {}, ["runs"]),
    ("compare-correction", "report", ["compare", "-p", "correction", "bonferoni"], {}, ["is not one of 'holm', 'fdr_bh'"]),
    ("compare-own-columns", "report", ["compare", "-p", "preds", "p.csv", "-y", "pred_cols: [p, q]", "-p", "label_col", "y",
                                       "-p", "id_cols", "rac"], {"p.csv": PREDS}, ["column 'q' is not in", "did you mean 'race'"]),
    ("compare-pred-cols", "report", ["compare", "-p", "preds", "p.csv", "-p", "pred_cols", "a"], {"p.csv": "a,label\n1,0\n"},
     ["name two or more prediction columns"]),
    # the viewer
    ("view-missing", "view", ["nowhere"], {}, ["no such folder nowhere"]),
    ("view-not-a-run", "view", ["runs"], {"runs/acrb/sim/r1/spec.json": "{}"}, ["neither a run folder", "runs below it"]),
    ("view-size", "view", ["run", "--size", "0"], {"run/spec.json": "{}"}, ["--size must be an integer ≥ 16"]),
    ("view-image-url", "view", ["run", "--image-url", "http://h/"], {"run/spec.json": "{}"}, ["--image-url only goes with --label-studio"]),
    ("view-label-studio", "view", ["run", "--label-studio"], {"run/spec.json": "{}"}, ["--label-studio takes a labelling export"]),
]


def _files(root: Path) -> set:
    return {p.relative_to(root).as_posix() + ("/" if p.is_dir() else "") for p in root.rglob("*")}


def _provide(root: Path, files: dict):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


@pytest.mark.parametrize("case,command,args,files,needles", CASES, ids=[c[0] for c in CASES])
def test_every_mistake_up_front_and_nothing_written(tmp_path, monkeypatch, capsys, case, command, args, files, needles):
    from acrb_nb import report, view
    _provide(tmp_path, files)
    before = _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    t0 = time.perf_counter()
    rc = (report.main if command == "report" else view.main)(list(args))
    took = time.perf_counter() - t0
    err = capsys.readouterr().err
    assert rc == 2, (rc, err[-2000:])
    for n in needles: assert n in err, (case, n, err[-3000:])
    assert _files(tmp_path) == before, sorted(_files(tmp_path) - before)   # no run folder, no report, no .failed.html
    print(f"FIRST-TIME {case}: refused in {took:.2f} s")


def test_the_table_covers_every_study_and_command():
    studies = {c[2][0] if c[1] == "report" else "view" for c in CASES}
    assert studies == {"acrb", "toxicity", "fairness", "iat", "compare", "view"} and len(CASES) >= 40, (studies, len(CASES))


def test_four_mistakes_of_four_kinds_one_message_with_lines(tmp_path):
    "The real command on a config file with four mistakes (a model, an attribute, a parameter name, a type): one message."
    (tmp_path / "four.yaml").write_text(FOUR)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "acrb_nb.report", "acrb", "-f", "four.yaml"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    took = time.perf_counter() - t0
    assert r.returncode == 2, r.stderr[-2000:]
    for n in ("4 problems with the parameters of acrb.ipynb and four.yaml", "line 1: model='flx'", "did you mean 'flux'",
              "line 2, attributes: 'religon'", "did you mean 'religion'", "line 3: unknown parameter 'n_base_prompt'",
              "line 4: parameter 'images_per_prompt'", "expects int"):
        assert n in r.stderr, (n, r.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["four.yaml"]
    print(f"FIRST-TIME four mistakes, one message, as a subprocess: {took:.2f} s")
