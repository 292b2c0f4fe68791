"""services.broker.k8s_env: StatefulSet pod name -> brokerId / brokerRole, then exec."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from services.broker import k8s_env


@pytest.mark.parametrize(("name", "ordinal"), [
    ("pmq-pocketmq-broker-a-0", 0), ("pmq-pocketmq-broker-a-1", 1), ("b-12", 12), ("a.b-c-7", 7)])
def test_ordinal_is_the_pod_name_suffix(name: str, ordinal: int) -> None:
    assert k8s_env.pod_ordinal(name) == ordinal


@pytest.mark.parametrize("name", ["broker", "broker-a", "broker-01", "-1", "Broker-1", "broker-1-", ""])
def test_names_without_an_ordinal_are_rejected(name: str) -> None:
    with pytest.raises(k8s_env.PodNameError, match="StatefulSet"):
        k8s_env.pod_ordinal(name)


def test_ordinal_zero_keeps_the_configured_master_role_others_are_slaves() -> None:
    assert k8s_env.broker_environment("mq-broker-a-0") == {"POCKETMQ_BROKER_ID": "0"}
    assert k8s_env.broker_environment("mq-broker-a-2") == {"POCKETMQ_BROKER_ID": "2",
                                                           "POCKETMQ_BROKER_ROLE": "SLAVE"}
    assert k8s_env.broker_environment("mq-broker-a-2", "none") == k8s_env.broker_environment("mq-broker-a-2")


@pytest.mark.parametrize("mode", ["kubernetes", "etcd"])
def test_under_a_controller_every_pod_is_member_ordinal_plus_one_with_the_master_role(mode: str) -> None:
    assert k8s_env.broker_environment("mq-broker-a-0", mode) == {"POCKETMQ_BROKER_ID": "1"}
    assert k8s_env.broker_environment("mq-broker-a-2", mode) == {"POCKETMQ_BROKER_ID": "3"}


class FakeExec:
    def __init__(self, error: OSError | None = None) -> None:
        self.calls: list[tuple[str, list[str], dict[str, str]]] = []
        self.error = error

    def __call__(self, file: str, args: list[str], env: dict[str, str]) -> None:
        self.calls.append((file, list(args), dict(env)))
        if self.error:
            raise self.error


def test_main_execs_the_command_with_the_derived_environment() -> None:
    fake = FakeExec()
    env = {"POD_NAME": "mq-broker-b-1", "HOSTNAME": "other-9", "KEEP": "1"}
    assert k8s_env.main(["--", "python", "-m", "services.broker", "-c", "/etc/b.conf"], env, fake) == 0
    ((file, args, child_env),) = fake.calls
    assert file == "python" and args == ["python", "-m", "services.broker", "-c", "/etc/b.conf"]
    assert child_env == {**env, "POCKETMQ_BROKER_ID": "1", "POCKETMQ_BROKER_ROLE": "SLAVE"}


def test_hostname_is_the_fallback_and_the_ordinal_wins(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeExec()
    k8s_env.main(["run"], {"HOSTNAME": "mq-broker-a-0", "POCKETMQ_BROKER_ID": "5"}, fake)
    assert fake.calls[0][2]["POCKETMQ_BROKER_ID"] == "0"
    assert any("overriding" in r.getMessage() for r in caplog.records)


def test_errors_do_not_exec() -> None:
    fake = FakeExec()
    assert k8s_env.main([], {"POD_NAME": "b-0"}, fake) == 2
    assert k8s_env.main(["run"], {"POD_NAME": "not-an-ordinal"}, fake) == 2
    assert fake.calls == []
    missing = FakeExec(FileNotFoundError(2, "No such file"))
    assert k8s_env.main(["missing"], {"POD_NAME": "b-0"}, missing) == 127


def test_real_exec_replaces_the_process() -> None:
    probe = ("import os; print(os.getpid(), os.environ['POCKETMQ_BROKER_ID'], "
             "os.environ.get('POCKETMQ_BROKER_ROLE'))")
    env = {**os.environ, "POD_NAME": "mq-broker-a-3"}
    proc = subprocess.Popen([sys.executable, "-m", "services.broker.k8s_env", sys.executable, "-c", probe],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    pid, broker_id, role = out.split()
    assert int(pid) == proc.pid, "the command must replace the wrapper (exec), not run as its child"
    assert (broker_id, role) == ("3", "SLAVE")
    assert "broker identity from pod ordinal" in err
