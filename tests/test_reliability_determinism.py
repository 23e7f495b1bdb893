"""Determinism: the same spec and seed, run twice in two fresh interpreters with different `PYTHONHASHSEED`s (so any
use of Python's salted `hash()` or of set/dict iteration order would show), give byte-identical Stage I prompts,
item keys, per-item results and metrics JSON (sorted keys, timestamps removed) — on the simulator (ACRB T2I and I2I,
IAT) and on tiny local models built from configs (Stable Diffusion, InstructPix2Pix and CLIP through diffusers /
open_clip, GPT-2 through transformers for zero-shot toxicity)."""
import difflib, json, os, subprocess, sys

import pytest

from reliability_helpers import DETERMINISM_CONFIGS, TESTS, child_env

AREA = "determinism"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.mark.budget(cpu=45, why="six configurations (tiny diffusers pipelines among them), each run twice from nothing: what is compared")
def test_same_spec_and_seed_twice_is_byte_identical(run_tmp, reliability):
    procs = []
    for i, hs in enumerate(("1", "2")):
        env = child_env(PYTHONHASHSEED=hs, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
        code = f"import reliability_helpers as h; h.determinism_artifacts({str(run_tmp / str(i))!r}, {str(run_tmp / f'{i}.json')!r})"
        procs.append(subprocess.Popen([sys.executable, "-c", code], env=env, cwd=str(run_tmp), stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=560)
        assert p.returncode == 0, err[-4000:]
    a, b = (json.loads((run_tmp / f"{i}.json").read_text()) for i in range(2))
    assert set(a) == set(b) and set(a) >= set(DETERMINISM_CONFIGS)
    compared = identical = 0
    diffs = []
    for cfg in sorted(a):
        for art in sorted(a[cfg]):
            compared += 1
            if a[cfg][art] == b[cfg][art]: identical += 1
            else:
                d = list(difflib.unified_diff(a[cfg][art].splitlines(), b[cfg][art].splitlines(), lineterm="", n=1))[:12]
                diffs.append(f"{cfg} / {art}:\n" + "\n".join(d))
    assert not diffs, "not reproducible:\n" + "\n\n".join(diffs)
    reliability.add(AREA, configs=len(a), config_names=set(a), compared=compared, identical=identical)
