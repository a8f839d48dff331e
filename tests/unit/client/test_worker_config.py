"""The reference worker's settings: flags first, then environment variables, then defaults.

A bad value is a ``ConfigError`` naming both the flag and the variable, raised
before anything connects. (That the command exits 2 with that message is
checked end to end in tests/integration/workers/test_runner.py.)
"""

from __future__ import annotations

import os
import re
import socket

import pytest

from taskforge_client.worker.config import ConfigError, load_config

KEY = {"TASKFORGE_API_KEY": "tf_worker_key"}


def test_defaults_need_only_an_api_key():
    config = load_config([], KEY)
    assert config.api_key == "tf_worker_key"
    assert config.api_url == "http://localhost:8080"
    assert (config.queue, config.handler, config.django_settings) == (None, None, None)
    assert (config.concurrency, config.wait_seconds) == (4, 5)
    assert (config.poll_interval, config.heartbeat_interval, config.request_timeout, config.grace_seconds) == (
        1.0,
        10.0,
        15.0,
        30.0,
    )
    assert (config.log_format, config.log_level) == ("json", "INFO")
    assert config.claim_cooldown == 0.05
    assert config.worker_id  # hostname-pid


def test_every_setting_is_read_from_its_environment_variable():
    environ = {
        **KEY,
        "TASKFORGE_API_URL": "https://tf.example",
        "QUEUE": "mail",
        "WORKER_ID": "w-7",
        "WORKER_CONCURRENCY": "16",
        "WORKER_POLL_INTERVAL": "0.5",
        "HEARTBEAT_INTERVAL": "3",
        "WORKER_REQUEST_TIMEOUT": "40",
        "WORKER_WAIT_SECONDS": "30",
        "WORKER_GRACE_SECONDS": "0",
        "WORKER_CLAIM_COOLDOWN": "0.2",
        "WORKER_LOG_FORMAT": "TEXT",
        "WORKER_LOG_LEVEL": "warning",
        "DJANGO_SETTINGS_MODULE": "mysite.settings",
    }
    config = load_config([], environ)
    assert (config.api_url, config.queue, config.worker_id) == ("https://tf.example", "mail", "w-7")
    assert (config.concurrency, config.wait_seconds) == (16, 30)
    assert (config.poll_interval, config.heartbeat_interval, config.request_timeout, config.grace_seconds) == (
        0.5,
        3.0,
        40.0,
        0.0,
    )
    assert (config.log_format, config.log_level) == ("text", "WARNING")
    assert config.claim_cooldown == 0.2
    assert config.django_settings == "mysite.settings"


def test_a_flag_wins_over_its_environment_variable():
    environ = {**KEY, "QUEUE": "from-env", "WORKER_CONCURRENCY": "2", "WORKER_LOG_LEVEL": "warning"}
    config = load_config(["--queue", "from-flag", "--concurrency", "8", "--log-level", "debug"], environ)
    assert (config.queue, config.concurrency, config.log_level) == ("from-flag", 8, "DEBUG")


def test_a_blank_environment_variable_counts_as_unset():
    config = load_config([], {**KEY, "QUEUE": "  ", "WORKER_CONCURRENCY": "", "TASKFORGE_API_URL": " "})
    assert (config.queue, config.concurrency, config.api_url) == (None, 4, "http://localhost:8080")


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        ([], {"TASKFORGE_API_KEY": ""}, "TASKFORGE_API_KEY is not set"),
        (["--api-url", "localhost:8080"], {}, "--api-url / TASKFORGE_API_URL must start with http"),
        (["--concurrency", "0"], {}, "--concurrency / WORKER_CONCURRENCY must be between 1 and 100"),
        ([], {"WORKER_CONCURRENCY": "101"}, "WORKER_CONCURRENCY must be between 1 and 100"),
        ([], {"WORKER_CONCURRENCY": "4.5"}, "WORKER_CONCURRENCY must be a whole number"),
        (["--wait-seconds", "31"], {}, "--wait-seconds / WORKER_WAIT_SECONDS must be between 0 and 30"),
        (["--poll-interval", "nan"], {}, "--poll-interval / WORKER_POLL_INTERVAL must be between"),
        (["--poll-interval", "soon"], {}, "WORKER_POLL_INTERVAL must be a number"),
        (["--heartbeat-interval", "0.1"], {}, "--heartbeat-interval / HEARTBEAT_INTERVAL must be between 0.2"),
        (["--grace-seconds", "-1"], {}, "--grace-seconds / WORKER_GRACE_SECONDS must be between 0"),
        (["--claim-cooldown", "-0.1"], {}, "--claim-cooldown / WORKER_CLAIM_COOLDOWN must be between 0 and 60"),
        ([], {"WORKER_CLAIM_COOLDOWN": "soon"}, "WORKER_CLAIM_COOLDOWN must be a number"),
        (["--log-format", "xml"], {}, "--log-format / WORKER_LOG_FORMAT must be json or text"),
        (["--log-level", "loud"], {}, "--log-level / WORKER_LOG_LEVEL must be one of DEBUG, INFO, WARNING, ERROR"),
        (["--handler", "mymodule.handle"], {}, "--handler must look like package.module:function"),
        (["--worker-id", "w" * 201], {}, "--worker-id / WORKER_ID must be at most 200 characters"),
    ],
)
def test_a_bad_setting_names_its_flag_and_variable(argv, env, message):
    with pytest.raises(ConfigError) as caught:
        load_config(argv, {**KEY, **env})
    assert message in str(caught.value)


@pytest.mark.parametrize(("timeout", "wait"), [("5", "5"), ("4", "5"), ("30", "30")])
def test_the_request_timeout_must_outlast_the_long_poll(timeout, wait):
    with pytest.raises(ConfigError, match="must exceed the long-poll wait"):
        load_config(["--request-timeout", timeout, "--wait-seconds", wait], KEY)


def test_a_request_timeout_just_above_the_wait_is_accepted():
    config = load_config(["--request-timeout", "5.5", "--wait-seconds", "5"], KEY)
    assert (config.request_timeout, config.wait_seconds) == (5.5, 5)


def test_default_worker_id_is_hostname_pid_and_a_random_suffix():
    """In containers every worker is pid 1 (and hostnames can repeat): the suffix keeps ids apart."""
    first, second = load_config([], KEY).worker_id, load_config([], KEY).worker_id
    assert first != second
    assert re.fullmatch(rf"{re.escape(socket.gethostname())}-{os.getpid()}-[0-9a-f]{{6}}", first)
    assert load_config(["--worker-id", "mine"], KEY).worker_id == "mine"
