import json
import subprocess
import sys

import pytest

from dragonfarm_core import environment
from dragonfarm_core.environment import _device, check, format_check


def test_cpu_build_on_a_gpu_machine_gets_a_reason_and_a_fix():
    device, why, fix = _device({"cuda_available": False, "cuda_build": None}, driver="580.1")
    assert device == "cpu" and "CPU-only build" in why and "580.1" in why
    assert fix and fix.startswith("pip install")


def test_old_driver_gets_a_reason_and_a_fix():
    device, why, fix = _device({"cuda_available": False, "cuda_build": "13.0"}, driver="470.2")
    assert device == "cpu" and "driver" in why and "13.0" in why and "driver" in fix


def test_cuda_and_plain_cpu():
    gpu = {"cuda_available": True, "gpus": [{"name": "H200"}]}
    assert _device(gpu, "580")[0] == "cuda"
    assert _device({"cuda_available": False}, None)[:1] == ("cpu",)
    assert _device({"error": "torch could not be imported: boom"}, None)[0] == "none"


def test_check_reports_facts_and_never_the_token(tmp_path, monkeypatch, capsys):
    secret = "hf_" + "x" * 30
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    facts = check(runs_dir=tmp_path / "runs")
    printed = capsys.readouterr().out
    assert facts["device"] == "cpu"  # this machine and CI have no GPU
    assert facts["libraries"]["torch"].startswith("2.")
    assert facts["hf_token_configured"] is True and facts["hub_reachable"] is False
    assert facts["free_disk_gb"] > 0
    assert secret not in printed and secret not in json.dumps(facts)
    assert "Training device: cpu" in format_check(facts)


@pytest.mark.slow
def test_check_never_imports_torch_in_this_process():
    code = (
        "import sys; from dragonfarm_core.environment import check; "
        "check(verbose=False); print('torch' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**environment.os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.stdout.strip().splitlines()[-1] == "False", done.stderr[-2000:]


@pytest.mark.slow
def test_cli_check_json(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dragonfarm_core.cli.commands",
            "check",
            "--json",
            "--runs-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**environment.os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["runs_dir"] == str(tmp_path)
