"""tests/conftest.py: under CI=true every kind of skip fails the run and names its reason; without
CI the same tests skip as usual. Each case runs pytest in a subprocess over a small test file,
with the suite's conftest loaded as a plugin."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import strict_skips
from tests.support import ROOT

CASES = {
    "test_call_skip.py": ("""
        import pytest

        def test_fine():
            pass

        def test_needs_java():
            pytest.skip("no Java runtime on PATH")
        """, "no Java runtime on PATH"),
    "test_skipif.py": ("""
        import pytest

        @pytest.mark.skipif(True, reason="promtool is not installed")
        def test_rules():
            pass
        """, "promtool is not installed"),
    "test_module_import.py": ("""
        import pytest

        pytest.importorskip("no_such_module_renamed_away")

        def test_anything():
            pass
        """, "no_such_module_renamed_away"),
    "test_fixture_skip.py": ("""
        import pytest

        @pytest.fixture
        def prometheus():
            pytest.skip("prometheus is not installed")

        def test_scrape(prometheus):
            pass
        """, "prometheus is not installed"),
}


XFAIL = """
    import pytest

    @pytest.mark.xfail(reason="known", strict=True)
    def test_known():
        assert False
    """


def run_pytest(tmp_path: Path, cases: list[str], ci: str | None) -> subprocess.CompletedProcess[str]:
    """One pytest run over ``cases`` plus an expected failure."""
    for name in cases:
        (tmp_path / name).write_text(textwrap.dedent(CASES[name][0]))
    (tmp_path / "test_xfail.py").write_text(textwrap.dedent(XFAIL))
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-rA"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )


def reported(out: str) -> str:
    """The terminal summary section listing the skips turned into failures."""
    assert "skips counted as failures (CI=true)" in out, out
    return out.split("skips counted as failures (CI=true)", 1)[1]


RUNTIME = ["test_call_skip.py", "test_fixture_skip.py", "test_skipif.py"]


def test_skips_in_a_test_its_marks_or_its_fixtures_fail_the_run_under_ci(tmp_path: Path) -> None:
    done = run_pytest(tmp_path, RUNTIME, ci="true")
    out, last = done.stdout, done.stdout.splitlines()[-1]
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, out
    # the call-time skip fails the test; a skipif mark or a fixture's skip errors its setup
    assert "1 failed" in last and "2 errors" in last and "1 passed" in last and "1 xfailed" in last, out
    assert "skipped" not in last, out
    for name in RUNTIME:
        reason = CASES[name][1]
        assert reason in reported(out), f"{name}: {reason!r} not reported\n{out}"
    assert out.count("skipped under CI=true, which counts as a failure: ") >= len(RUNTIME), out


def test_a_module_skipped_at_collection_fails_the_run_under_ci(tmp_path: Path) -> None:
    done = run_pytest(tmp_path, ["test_module_import.py"], ci="true")
    assert done.returncode == pytest.ExitCode.INTERRUPTED, done.stdout
    assert "ERROR collecting test_module_import.py" in done.stdout, done.stdout
    assert "no_such_module_renamed_away" in reported(done.stdout), done.stdout


def test_without_ci_a_skip_is_a_skip(tmp_path: Path) -> None:
    done = run_pytest(tmp_path, sorted(CASES), ci=None)
    assert done.returncode == pytest.ExitCode.OK, done.stdout
    assert "1 passed, 4 skipped, 1 xfailed" in done.stdout.splitlines()[-1], done.stdout
    assert "skipped under CI=true" not in done.stdout


@pytest.mark.parametrize(("value", "strict"), [("true", True), ("1", True), ("TRUE", True), ("yes", True),
                                               ("false", False), ("0", False), ("", False)])
def test_which_ci_values_mean_ci(value: str, strict: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", value)
    assert strict_skips() is strict
