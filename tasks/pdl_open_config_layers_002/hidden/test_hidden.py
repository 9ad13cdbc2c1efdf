from src.config import load_config


def test_environment_override_keeps_sibling_settings():
    """Issue: "Expected: each layer (defaults, then the config file, then the environment) only replaces the individual settings it actually names, at any depth." """
    config = load_config(environ={"LEDGER__DATABASE__PORT": "6543"})
    assert config.get("database.port") == 6543
    assert config.get("database.host") == "localhost"
    assert config.get("database.name") == "ledger"
    assert config.get("database.user") == "ledger"


def test_file_override_keeps_sibling_settings():
    """Issue: "The same thing happens from the config file: a file containing only … leaves `service.name`, `service.host` and `service.workers` undefined, although they all have built-in defaults." """
    config = load_config(text="[service]\nport = 9000\n", environ={})
    assert config.get("service") == {
        "name": "ledger",
        "host": "127.0.0.1",
        "port": 9000,
        "workers": 2,
    }


def test_nested_section_override_keeps_siblings():
    """Issue: "For example `LEDGER__DATABASE__POOL__SIZE=20` should change the pool size and nothing else: the pool timeout and recycle values, and the other database settings, should keep whatever the file or the defaults gave them…" """
    config = load_config(environ={"LEDGER__DATABASE__POOL__SIZE": "20"})
    assert config.get("database.pool") == {"size": 20, "timeout": 30.0, "recycle": 1800}
    assert config.get("database.host") == "localhost"


def test_file_and_environment_each_override_part_of_a_section():
    """Issue: "…a file and the environment should be able to override different keys of the same section side by side." """
    text = (
        "[database]\n"
        "host = db.internal\n"
        "[database.pool]\n"
        "timeout = 5\n"
    )
    environ = {
        "LEDGER__DATABASE__POOL__SIZE": "12",
        "LEDGER__DATABASE__USER": "app",
    }
    config = load_config(text=text, environ=environ)
    assert config.get("database") == {
        "host": "db.internal",
        "port": 5432,
        "name": "ledger",
        "user": "app",
        "pool": {"size": 12, "timeout": 5, "recycle": 1800},
    }


def test_every_setting_survives_a_single_override():
    """Issue: "Expected: each layer (defaults, then the config file, then the environment) only replaces the individual settings it actually names, at any depth."

    src/merge.py docstring: "The inputs are never modified; the result shares no mutable state with them."
    """
    baseline = dict(load_config(environ={}).items())
    config = load_config(environ={"LEDGER__SERVICE__WORKERS": "8"})
    overridden = dict(config.items())
    assert set(overridden) == set(baseline)
    changed = {k for k in baseline if baseline[k] != overridden[k]}
    assert changed == {"service.workers"}
    assert overridden["service.workers"] == 8
    assert dict(load_config(environ={}).items()) == baseline
