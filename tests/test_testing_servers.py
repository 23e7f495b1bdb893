"""Fake API servers in their own processes (`python -m acrb_nb.testing`), driven by JSON scripts and called by the real SDKs.

Covers what the notebook `nbs/03_testing.ipynb` cannot: a server outside the test process, a JSONL log that
survives SIGKILL, a client in yet another process, the command line itself, and cleanup when the parent dies.
"""
import json, os, signal, subprocess, sys, textwrap, time
from collections import Counter

import pytest
import openai
from google import genai
from google.genai import types, errors as genai_errors

from acrb_nb.testing import (start_server_process, stop_server_process, read_log, decode_image, png_bytes,
                             default_image, Script, Rule, RateLimit, ServerError, PolicyRefusal, Filtered, Ok)

pytestmark = pytest.mark.timeout(120)
NO_RETRY = types.HttpRetryOptions(attempts=1)


@pytest.fixture
def procs():
    "Server processes started by a test; all are stopped at teardown, even when the test fails."
    started = []
    yield started
    for p in started: stop_server_process(p)


def gemini_client(base_url, timeout_ms=None):
    return genai.Client(api_key='test-key', http_options=types.HttpOptions(
        base_url=base_url, api_version='v1beta', timeout=timeout_ms, retry_options=NO_RETRY))


def wait_for_records(path, n, timeout=10.):
    "Poll a JSONL log until it holds `n` records (the server writes on arrival, the client may still be waiting)."
    t0 = time.time()
    while len(recs := read_log(path)) < n and time.time() - t0 < timeout: time.sleep(0.05)
    return recs


def test_openai_process_json_script(tmp_path, procs):
    log = tmp_path / 'calls.jsonl'
    script = Script(queue=[RateLimit(retry_after=3), ServerError(503)],
                    rules=[Rule(PolicyRefusal(), contains='BLOCKME')])
    proc, url = start_server_process('openai', script, log_path=log, image_size=(32, 32))
    procs.append(proc)
    assert url.startswith('http://127.0.0.1:') and url.endswith('/v1')
    client = openai.OpenAI(base_url=url, api_key='test-key', max_retries=0)
    gen = lambda p: client.images.generate(model='gpt-image-1', prompt=p)

    with pytest.raises(openai.RateLimitError) as e: gen('a nurse')
    assert e.value.status_code == 429 and e.value.response.headers['retry-after'] == '3'
    with pytest.raises(openai.InternalServerError) as e: gen('a nurse')
    assert e.value.status_code == 503
    with pytest.raises(openai.BadRequestError) as e: gen('a BLOCKME nurse')  # the rule wins over the (empty) queue
    assert e.value.code == 'moderation_blocked'
    assert decode_image(gen('a nurse').data[0].b64_json).size == (32, 32)
    r = client.chat.completions.create(model='gpt-4o-mini', logprobs=True, top_logprobs=2,
                                       messages=[{'role': 'user', 'content': 'Respectful?'}])
    assert len(r.choices[0].logprobs.content[0].top_logprobs) == 2

    recs = read_log(log)
    assert [(r['prompt'], r['action'], r['status']) for r in recs] == [
        ('a nurse', 'rate_limit', 429), ('a nurse', 'server_error', 503), ('a BLOCKME nurse', 'policy_refusal', 400),
        ('a nurse', 'ok', 200), ('Respectful?', 'ok', 200)]
    assert [r['seq'] for r in recs] == list(range(5))
    assert stop_server_process(proc) == 0  # SIGTERM: clean exit


def test_gemini_cli_script_file_and_sigkill(tmp_path):
    "The command line as documented; the log is flushed per request, so it is complete after SIGKILL."
    (tmp_path / 'script.json').write_text(json.dumps({
        'rules': [{'contains': 'BLOCKME', 'action': {'kind': 'policy_refusal', 'code': 'SAFETY'}},
                  {'contains': 'FILTERME', 'action': 'filtered'}],
        'queue': ['drop']}))
    log = tmp_path / 'calls.jsonl'
    proc = subprocess.Popen([sys.executable, '-m', 'acrb_nb.testing', 'gemini', '--port', '0', '--latency', '0.05',
                             '--log', str(log), '--script', str(tmp_path / 'script.json'), '--image-size', '48x32'],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith('http://127.0.0.1:') and not url.endswith('/v1')
        client = gemini_client(url)
        image_cfg = types.GenerateContentConfig(response_modalities=['TEXT', 'IMAGE'])
        photo = png_bytes(default_image('input', (16, 16), []))
        ask = lambda text, cfg=None: client.models.generate_content(
            model='gemini-2.5-flash-image', config=cfg,
            contents=[text, types.Part.from_bytes(data=photo, mime_type='image/png')])

        with pytest.raises(Exception) as e: ask('first call is dropped')
        assert type(e.value).__name__ == 'RemoteProtocolError'
        r = ask('make it a chef', image_cfg)
        assert decode_image(r.candidates[0].content.parts[1].inline_data.data).size == (48, 32)
        r = ask('BLOCKME', image_cfg)
        assert r.prompt_feedback.block_reason == types.BlockedReason.SAFETY and r.candidates is None
        r = ask('FILTERME', image_cfg)
        assert r.candidates[0].finish_reason == types.FinishReason.IMAGE_SAFETY
    finally:
        proc.send_signal(signal.SIGKILL); proc.wait(10)
        proc.stdout.close(); proc.stderr.close()
    recs = read_log(log)
    assert [(r['action'], r['status'], r['n_images']) for r in recs] == [
        ('drop', None, 1), ('ok', 200, 1), ('policy_refusal', 200, 1), ('filtered', 200, 1)]
    assert all(r['path'] == '/v1beta/models/gemini-2.5-flash-image:generateContent' for r in recs)


CLIENT = textwrap.dedent('''
    import sys, openai
    client = openai.OpenAI(base_url=sys.argv[1], api_key='test-key', max_retries=0, timeout=float(sys.argv[2]))
    for i in range(int(sys.argv[3])):
        try: client.chat.completions.create(model='gpt-4o-mini', messages=[{'role': 'user', 'content': f'item {i}'}])
        except openai.RateLimitError: client.chat.completions.create(model='gpt-4o-mini', messages=[{'role': 'user', 'content': f'item {i}'}])
        print(i, flush=True)
''')


def test_client_in_another_process_counted_via_log(tmp_path, procs):
    "Every prompt is rate-limited once (a per-prompt rule, so deterministic across processes), then succeeds."
    log = tmp_path / 'calls.jsonl'
    proc, url = start_server_process('openai', {'rules': [{'action': 'rate_limit', 'times': 1, 'per_prompt': True}]},
                                     latency=0.05, log_path=log)
    procs.append(proc)
    out = subprocess.run([sys.executable, '-c', CLIENT, url, '5', '4'], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    counts = Counter(r['prompt'] for r in read_log(log))
    assert counts == Counter({f'item {i}': 2 for i in range(4)})
    assert [r['status'] for r in read_log(log) if r['prompt'] == 'item 0'] == [429, 200]


def test_killed_client_leaves_its_call_in_the_log(tmp_path, procs):
    "A client killed while its request hangs: the server logged the call on arrival (what kill-and-resume tests count)."
    log = tmp_path / 'calls.jsonl'
    proc, url = start_server_process('openai', {'rules': [{'contains': 'item 2', 'action': {'kind': 'timeout', 'delay': 30}}]},
                                     log_path=log)
    procs.append(proc)
    client = subprocess.Popen([sys.executable, '-c', CLIENT, url, '60', '5'], stdout=subprocess.PIPE, text=True)
    try:
        recs = wait_for_records(log, 3)
        assert [r['prompt'] for r in recs] == ['item 0', 'item 1', 'item 2']
        client.kill(); client.wait(10)
    finally:
        if client.poll() is None: client.kill(); client.wait(10)
        client.stdout.close()
    assert recs[2]['action'] == 'timeout' and recs[2]['status'] is None
    # The server is still serving others after the client died.
    c = openai.OpenAI(base_url=url, api_key='test-key', max_retries=0)
    assert c.chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'item 3'}]).choices[0].message.content
    assert len(read_log(log)) == 4


def test_timeout_and_fixed_port_and_hooks(tmp_path, procs):
    "A client-side timeout against a process server; an explicit port; content hooks imported by the child."
    (tmp_path / 'judge_hooks.py').write_text(textwrap.dedent('''
        import math
        def hooks():
            def logprobs(req, text, top):
                alts = [{'token': 'Yes', 'logprob': math.log(0.7)}, {'token': 'No', 'logprob': math.log(0.3)}]
                return [{'token': 'Yes', 'logprob': math.log(0.7), 'top_logprobs': alts[:top]}]
            return {'text_fn': lambda req: 'Yes', 'logprob_fn': logprobs}
    '''))
    import socket
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]
    proc, url = start_server_process('openai', [{'kind': 'timeout', 'delay': 5}], port=port, hooks='judge_hooks:hooks',
                                     env={'PYTHONPATH': str(tmp_path)}, log_path=tmp_path / 'calls.jsonl')
    procs.append(proc)
    assert url == f'http://127.0.0.1:{port}/v1'
    client = openai.OpenAI(base_url=url, api_key='test-key', max_retries=0, timeout=0.3)
    msgs = [{'role': 'user', 'content': 'Respectful?'}]
    t0 = time.time()
    with pytest.raises(openai.APITimeoutError): client.chat.completions.create(model='m', messages=msgs)
    assert time.time() - t0 < 3
    r = client.chat.completions.create(model='m', messages=msgs, logprobs=True, top_logprobs=2)
    assert r.choices[0].message.content == 'Yes'
    assert [round(2.718281828 ** t.logprob, 3) for t in r.choices[0].logprobs.content[0].top_logprobs] == [0.7, 0.3]


def test_bad_startup_reports_stderr(tmp_path):
    with pytest.raises(RuntimeError, match='No module named'):
        start_server_process('openai', hooks='no_such_module_abc:hooks', log_path=tmp_path / 'c.jsonl', startup_timeout=30)
    assert 'no_such_module_abc' in (tmp_path / 'c.jsonl.stderr').read_text()
    out = subprocess.run([sys.executable, '-m', 'acrb_nb.testing', 'openai', '--script', '{not json'],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and 'neither a JSON file nor inline JSON' in out.stderr


PARENT = textwrap.dedent('''
    import os, sys
    from acrb_nb.testing import start_server_process
    proc, url = start_server_process('gemini')
    print(proc.pid, url, flush=True)
    os._exit(0)  # die without stopping the server
''')


def test_server_exits_when_its_parent_dies():
    out = subprocess.run([sys.executable, '-c', PARENT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout.split()[0])
    t0 = time.time()
    def gone():
        try: os.kill(pid, 0)
        except ProcessLookupError: return True
        try:  # an exited process nobody has reaped yet (PID 1 of some containers) counts as gone
            with open(f'/proc/{pid}/stat') as f: return f.read().rsplit(')', 1)[1].split()[0] == 'Z'
        except OSError: return True
    while time.time() - t0 < 10:
        if gone(): return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    pytest.fail(f'server process {pid} outlived its parent by 10 s')
