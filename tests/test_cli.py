"""The command line: user errors are one line and exit status 2; no tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from snapshotd.cli import main


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "snapshotd", *args],
        capture_output=True,
        text=True,
        timeout=240,  # stops a hang; a crawl on a loaded machine takes what it takes
        env={**os.environ, **(env or {})},
    )


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_broken_config_file_stops_start_up(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[server]\nport = 'eighty'\n")
    line = one_line_error(run("serve", "--config", str(cfg)))
    assert str(cfg) in line and "server.port" in line


def test_a_bad_dns_server_stops_start_up(tmp_path):
    db = str(tmp_path / "s.db")
    args = ("serve", "--origin", "http://127.0.0.1:9", "--db", db)
    line = one_line_error(run(*args, "--dns-servers", "127.0.0.1:53,ns1.example"))
    assert "server.dns_servers: 'ns1.example' is not address or address:port" in line
    line = one_line_error(run(*args, env={"SNAPSHOTD_DNS_SERVERS": "[::1]:x"}))
    assert "'[::1]:x' is not address or address:port" in line


def test_toml_syntax_error_names_the_file_and_line(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[server]\nport = 8080\n[[site]\n")
    line = one_line_error(run("serve", "--config", str(cfg)))
    assert str(cfg) in line and "line 3" in line


def test_broken_rules_file_stops_start_up_with_file_and_line(tmp_path):
    rules = tmp_path / "site.rules"
    rules.write_text("RewriteEngine On\n# fine\nRewriteRule ^/(a+)+$ /x [L]\n")
    cfg = tmp_path / "ok.toml"
    cfg.write_text(f'[[site]]\norigin = "http://127.0.0.1:3000"\nrules = "{rules}"\n')
    line = one_line_error(run("serve", "--config", str(cfg)))
    assert f"{rules}:3" in line


def test_missing_chromium_stops_start_up(tmp_path):
    cfg = tmp_path / "ok.toml"
    cfg.write_text(
        '[browser]\nexecutable = "/nonexistent/chromium"\n'
        '[[site]]\norigin = "http://127.0.0.1:3000"\n'
    )
    line = one_line_error(run("serve", "--config", str(cfg), "--db", str(tmp_path / "x.db")))
    assert "chromium" in line.lower()


def test_crawl_with_no_site_is_a_clear_error(tmp_path):
    line = one_line_error(run("crawl", "--db", str(tmp_path / "x.db")))
    assert "--origin" in line


def test_a_postgresql_server_that_does_not_answer_is_one_line(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here
    line = one_line_error(run("status", "--db", f"postgresql://u:pw@127.0.0.1:{port}/snaps"))
    assert line.startswith(f"snapshotd: postgresql://127.0.0.1:{port}/snaps: ")
    assert "pw" not in line


def test_a_file_that_is_not_a_database_is_one_line_and_kept(tmp_path):
    db = tmp_path / "notes.db"
    db.write_text("shopping list\n" * 300)
    for command in ("status", "report"):
        # Exits at once (an open SQLite thread once kept it running for good).
        line = one_line_error(run(command, "--db", str(db)))
        assert line == f"snapshotd: {db}: file is not a database"
    line = one_line_error(run("serve", "--db", str(db), "--origin", "http://127.0.0.1:9"))
    assert "file is not a database" in line
    assert db.read_text() == "shopping list\n" * 300


def test_status_and_report_of_a_missing_db(tmp_path):
    line = one_line_error(run("status", "--db", str(tmp_path / "none.db")))
    assert "no such database" in line


def test_rules_check_exit_codes(tmp_path, capsys):
    good = tmp_path / "good.rules"
    good.write_text("^/(.*)/$ /$1\n")
    bad = tmp_path / "bad.rules"
    bad.write_text("^/ok /x\n^/(unclosed /y\n")
    assert main(["rules", "check", str(good)]) == 0
    assert main(["rules", "check", str(bad)]) == 2
    assert f"{bad}:2" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--help"], ["serve", "--help"], ["rules", "eval", "--help"]])
def test_help(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    assert "usage" in capsys.readouterr().out


def test_rules_eval_takes_ignore_params_from_a_site_of_the_config(tmp_path, capsys):
    rules = tmp_path / "a.rules"
    rules.write_text("^/none$ /none\n")
    config = tmp_path / "snapshotd.toml"
    config.write_text(
        "[[site]]\nname='keep'\norigin='http://127.0.0.1:9'\nignore_params=[]\n"
        f"[[site]]\nname='own'\norigin='http://127.0.0.1:9'\nrules='{rules}'\n"
        "ignore_params=['sid']\n"
    )
    url = "/p?sid=1&utm_source=x"

    def path(*argv: str) -> str:
        assert main(["rules", "eval", "--rules", str(rules), *argv, url]) == 0
        return json.loads(capsys.readouterr().out)["path"]

    assert path() == "/p?sid=1"  # the built-in list
    assert path("--config", str(config)) == "/p?utm_source=x"  # the site with these rules
    assert path("--config", str(config), "--site", "keep") == url
    assert main(["rules", "eval", "--rules", str(rules), "--site", "own", url]) == 2
    assert main(["rules", "eval", "--rules", str(rules), "--config", str(config),
                 "--site", "nope", url]) == 2
    assert "no site is named 'nope'" in capsys.readouterr().err


def test_recipe_prints_the_tested_recipe_for_the_site(tmp_path, capsys):
    from tests.front import recipe

    argv = ["--origin", "http://127.0.0.1:3000", "--hosts", "shop.test,www.shop.test"]
    assert main(["recipe", "nginx", *argv, "--port", "8081", "--listen", "8000"]) == 0
    assert capsys.readouterr().out == recipe(
        "nginx.conf", LISTEN="8000", SERVER_NAME="shop.test www.shop.test",
        APP="127.0.0.1:3000", SNAPSHOTD="127.0.0.1:8081",
    )
    assert main(["recipe", "apache", *argv, "--host", "0.0.0.0"]) == 0
    assert capsys.readouterr().out == recipe(
        "apache.conf", LISTEN="*:80", SERVER_NAME="shop.test", APP="127.0.0.1:3000",
        SNAPSHOTD="127.0.0.1:8080",
    )
    # Caddy serves the site's names (over HTTPS, its certificates its own) unless told.
    assert main(["recipe", "caddy", *argv]) == 0
    assert capsys.readouterr().out == recipe(
        "Caddyfile", LISTEN="shop.test, www.shop.test", SERVER_NAME="shop.test www.shop.test",
        APP="127.0.0.1:3000", SNAPSHOTD="127.0.0.1:8080",
    )
    assert main(["recipe", "haproxy", *argv, "--listen", "127.0.0.1:8000"]) == 0
    assert capsys.readouterr().out == recipe(
        "haproxy.cfg", LISTEN="127.0.0.1:8000", SERVER_NAME="shop.test www.shop.test",
        APP="127.0.0.1:3000", SNAPSHOTD="127.0.0.1:8080",
    )
    # a site without hosts, or an https origin: one line, exit 2
    assert main(["recipe", "nginx", "--origin", "http://127.0.0.1:3000"]) == 2
    assert "give --hosts" in capsys.readouterr().err
    assert main(["recipe", "nginx", "--origin", "https://127.0.0.1:3000", "--hosts", "a.b"]) == 2
    assert "over http" in capsys.readouterr().err


# Which heavy packages a command loaded, printed after it ran in a fresh interpreter.
LOADED = (
    "import sys\n"
    "from snapshotd.cli import main\n"
    "status = main(sys.argv[1:])\n"
    "heavy = ('playwright', 'httpx', 'starlette', 'uvicorn')\n"
    "print(status, sorted(m for m in heavy if m in sys.modules))\n"
)


def test_a_command_loads_only_what_it_uses(tmp_path):
    """The store's commands start without Chromium's driver, the HTTP client or the server
    (loading them all made every command take about a second before it began)."""
    db = str(tmp_path / "s.db")

    def loaded(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-c", LOADED, *args], capture_output=True, text=True, timeout=240
        )
        return proc.stdout.strip().splitlines()[-1]

    assert loaded("site", "set", "shop", "--db", db, "origin=http://127.0.0.1:9") == "0 []"
    assert loaded("site", "list", "--db", db) == "0 []"
    assert loaded("report", "--db", db) == "0 []"
    # An error of a module a command loaded is still one line.
    line = one_line_error(run("site", "show", "nobody", "--db", db))
    assert line == "snapshotd: no site is named 'nobody'"
