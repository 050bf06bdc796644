#!/usr/bin/env bash
# A team's MLflow on one machine, for a try-out and for the tests (tests/integration/test_postgres.py):
# PostgreSQL as the backend store, behind `mlflow server`, which also serves the artifacts
# (--serve-artifacts: clients upload and download through it and need no access to the store).
# Production runs the same `mlflow server` against a real PostgreSQL: docs/cluster.md,
# "A team's MLflow".
#
#   scripts/mlflow_server.sh [--port 5000] [--pg-port N] [--basic-auth] [DIR]
#
# DIR holds the database, the artifacts, the logs and the passwords; the default is
# ${XDG_DATA_HOME:-~/.local/share}/scalesweep/mlflow-server. Started again on the same DIR, it
# serves the same runs. PostgreSQL comes from the pgserver wheel (scalesweep's dev extra: its
# binaries, not its Python API, which listens on a Unix socket only) unless PG_BIN names a bin
# directory of PostgreSQL's (e.g. /usr/lib/postgresql/16/bin); the driver is psycopg 3
# (psycopg[binary]: SQLAlchemy 2.1 opens postgresql:// with it); psql 15 or newer.
# Both listen on 127.0.0.1 only.
#
# Passwords: MLFLOW_SERVER_DB_PASSWORD (the database user's) and, with --basic-auth,
# MLFLOW_SERVER_ADMIN_PASSWORD (MLflow's admin user's, at least 12 characters); each one not
# given is generated on first use and kept in DIR (mode 600). They are never printed and never
# on a command line (which `ps` shows every user): the server reads the database password from
# PGPASSWORD, as libpq does for `scalesweep --tracking-uri postgresql://user:pw@...` too.
#
# It prints the tracking URI and the pids, runs until Ctrl-C (or SIGTERM), and then stops what
# it started: the MLflow server first, so no client is left mid-write, then PostgreSQL.
set -euo pipefail
# what it writes (passwords, the auth app's password hashes, the database) is this user's alone
umask 077

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
port=5000
pg_port=""
basic_auth=0
dir=""
usage() { sed -n '7p' "${BASH_SOURCE[0]}" | sed 's/^#   //' >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --port) port="$2"; shift 2 ;;
        --pg-port) pg_port="$2"; shift 2 ;;
        --basic-auth) basic_auth=1; shift ;;
        -h|--help) usage ;;
        -*) echo "mlflow_server.sh: unknown option $1" >&2; usage ;;
        *) [ -z "$dir" ] || usage; dir="$1"; shift ;;
    esac
done
dir="${dir:-${XDG_DATA_HOME:-$HOME/.local/share}/scalesweep/mlflow-server}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
# the checkout's environment (scripts/env.sh) unless PYTHON names another one with mlflow
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$root/.venv/bin/python" ]; then PYTHON="$root/.venv/bin/python"; else PYTHON=python3; fi
fi

# --- PostgreSQL's binaries ------------------------------------------------------------------
if [ -z "${PG_BIN:-}" ]; then
    # find_spec locates the wheel without importing it (its import sets up a server registry)
    PG_BIN="$("$PYTHON" -c 'import importlib.util, pathlib
spec = importlib.util.find_spec("pgserver")
print(pathlib.Path(spec.origin).parent / "pginstall" / "bin" if spec and spec.origin else "")')"
    if [ -z "$PG_BIN" ]; then
        echo "mlflow_server.sh: no PostgreSQL: pip install pgserver 'psycopg[binary]' (scalesweep's" \
             "dev extra: bash scripts/env.sh), or set PG_BIN to PostgreSQL's bin directory (16+)" >&2
        exit 2
    fi
fi
# postgres refuses to run as root. As root, it runs in a user namespace of its own as uid
# 65534 mapped onto root: it owns the files root owns, with none of root's rights, and no
# system user or chmod of the path is needed.
as_pg=()
if [ "$(id -u)" = 0 ]; then
    as_pg=(unshare --user --map-user=65534 --map-group=65534 --)
    if ! "${as_pg[@]}" true 2>/dev/null; then
        echo "mlflow_server.sh: PostgreSQL will not run as root, and this machine allows no user" \
             "namespace (unshare --user) to run it in: run this script as an ordinary user" >&2
        exit 2
    fi
fi

free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
secret() { "$PYTHON" -c 'import secrets; print(secrets.token_urlsafe(18))'; }
# a password: the environment's, else the one kept in DIR, else a new one kept there
password() {  # $1: environment variable, $2: file in DIR
    local value="${!1:-}" file="$dir/$2"
    if [ -z "$value" ]; then
        if [ -s "$file" ]; then value="$(cat "$file")"; else value="$(secret)"; fi
    fi
    printf '%s\n' "$value" > "$file"
    printf '%s' "$value"
}
db_user=mlflow
db_name=mlflow
db_password="$(password MLFLOW_SERVER_DB_PASSWORD db.password)"
pg_port="${pg_port:-$(free_port)}"
mkdir -p "$dir/artifacts"

# --- Stop what was started, whatever ends the script ----------------------------------------
pg_pid=""
mlflow_pid=""
socket_dir=""
stop() {  # $1: pid of a process group leader, $2: first signal, $3: seconds before SIGKILL
    local pid="$1" sig="$2" i
    kill -0 "$pid" 2>/dev/null || return 0
    kill -"$sig" -- "-$pid" 2>/dev/null || kill -"$sig" "$pid" 2>/dev/null || true
    for ((i = 0; i < $3 * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
        sleep 0.1
    done
    kill -KILL -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
cleanup() {
    set +e
    trap '' INT TERM  # a second Ctrl-C does not cut the clean-up short
    [ -n "$mlflow_pid" ] && stop "$mlflow_pid" TERM 30
    [ -n "$pg_pid" ] && stop "$pg_pid" INT 30  # SIGINT: PostgreSQL's fast shutdown
    [ -n "$socket_dir" ] && rm -rf "$socket_dir"
    [ -n "$mlflow_pid$pg_pid" ] && echo "stopped"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- PostgreSQL on 127.0.0.1 -----------------------------------------------------------------
pgdata="$dir/postgres"
if [ ! -s "$pgdata/PG_VERSION" ]; then
    # its superuser connects through the Unix socket only (in a directory only we can enter);
    # over TCP every user needs a password
    rm -rf "$pgdata"
    "${as_pg[@]}" "$PG_BIN/initdb" -D "$pgdata" -U postgres -E UTF8 --auth-local=trust \
        --auth-host=scram-sha-256 > "$dir/initdb.log" 2>&1 \
        || { echo "mlflow_server.sh: initdb failed, see $dir/initdb.log" >&2; exit 1; }
fi
# a short path of its own for the socket (107 bytes at most), removed at the end
socket_dir="$(mktemp -d "${TMPDIR:-/tmp}/scalesweep-pg.XXXXXX")"
# setsid: its own process group, so a Ctrl-C reaches only this script, which stops the server
# after MLflow's; exec, so $! is the server's pid
setsid "${as_pg[@]}" "$PG_BIN/postgres" -D "$pgdata" -h 127.0.0.1 -p "$pg_port" -k "$socket_dir" \
    >> "$dir/postgres.log" 2>&1 &
pg_pid=$!
psql=("$PG_BIN/psql" -h "$socket_dir" -p "$pg_port" -U postgres -d postgres -X -q -v ON_ERROR_STOP=1)
for ((i = 0; ; i++)); do
    "$PG_BIN/pg_isready" -h "$socket_dir" -p "$pg_port" -q && break
    if ! kill -0 "$pg_pid" 2>/dev/null || [ "$i" -ge 600 ]; then
        echo "mlflow_server.sh: PostgreSQL did not start, see $dir/postgres.log" >&2
        exit 1
    fi
    sleep 0.1
done
# the user and its database, created once; the password set on every start (the one given now
# wins). psql reads it from its environment (\getenv, psql 15+) and quotes it (:'pw'): never on
# a command line, which `ps` shows every user (a prefix assignment is no argument of anyone's).
SCALESWEEP_DB_PASSWORD="$db_password" "${psql[@]}" -v user="$db_user" -v db="$db_name" <<'SQL'
\getenv pw SCALESWEEP_DB_PASSWORD
SELECT NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'user') AS new_user \gset
\if :new_user
CREATE ROLE :"user" LOGIN;
\endif
ALTER ROLE :"user" PASSWORD :'pw';
SELECT NOT EXISTS (SELECT FROM pg_database WHERE datname = :'db') AS new_db \gset
\if :new_db
CREATE DATABASE :"db" OWNER :"user";
\endif
SQL

# --- MLflow's server on it -------------------------------------------------------------------
mlflow_args=(--backend-store-uri "postgresql://$db_user@127.0.0.1:$pg_port/$db_name"
             --serve-artifacts --artifacts-destination "$dir/artifacts"
             --host 127.0.0.1 --port "$port" --workers "${MLFLOW_SERVER_WORKERS:-1}")
auth_env=()
if [ "$basic_auth" = 1 ]; then
    # MLflow's basic-auth app keeps its users in a database of its own (here a file in DIR);
    # the admin user is created with this password on the first start
    admin_password="$(password MLFLOW_SERVER_ADMIN_PASSWORD admin.password)"
    cat > "$dir/basic_auth.ini" <<INI
[mlflow]
default_permission = READ
database_uri = sqlite:///$dir/basic_auth.db
admin_username = admin
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
# a checked password is remembered for a minute: each request otherwise pays a PBKDF2 hash
# (0.6 s on a loaded 2-core machine), and a sweep logs with many requests
auth_cache_ttl_seconds = 60
INI
    # its login form's CSRF tokens are signed with this key, which must outlive a restart
    flask_key="$(password MLFLOW_FLASK_SERVER_SECRET_KEY flask.secret)"
    mlflow_args+=(--app-name basic-auth)
    auth_env=(MLFLOW_AUTH_CONFIG_PATH="$dir/basic_auth.ini" MLFLOW_AUTH_ADMIN_PASSWORD="$admin_password"
              MLFLOW_FLASK_SERVER_SECRET_KEY="$flask_key")
fi
# MLflow 3's job runner (its GenAI jobs: judges, trace rollups; 7 processes, which took 30 s
# to stop) has nothing to do for scalesweep, which logs runs, metrics and artifacts only.
# The secrets are exported in a subshell that then becomes the server (exec, so $! is its pid),
# not given to `env`, whose command line would hold them.
(
    export PGPASSWORD="$db_password"
    for assignment in "${auth_env[@]}"; do export "${assignment?}"; done
    export MLFLOW_SERVER_ENABLE_JOB_EXECUTION="${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}"
    exec setsid "$PYTHON" -m mlflow server "${mlflow_args[@]}"
) >> "$dir/mlflow.log" 2>&1 &
mlflow_pid=$!
# MLflow 3's server runs its database migrations and starts its job consumers first: minutes
# on a loaded 2-core machine the first time
"$PYTHON" - "http://127.0.0.1:$port/health" "$mlflow_pid" <<'PY' \
    || { echo "mlflow_server.sh: the MLflow server did not start, see $dir/mlflow.log" >&2; exit 1; }
import os, sys, time, urllib.request
url, pid, end = sys.argv[1], int(sys.argv[2]), time.monotonic() + 240
while True:
    try:
        with urllib.request.urlopen(url, timeout=2):
            break
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            sys.exit(1)
        if time.monotonic() > end:
            sys.exit(1)
        time.sleep(0.5)
PY

echo "postgres:     pid $pg_pid, postgresql://$db_user:***@127.0.0.1:$pg_port/$db_name" \
     "(password in $dir/db.password)"
echo "mlflow server: pid $mlflow_pid, artifacts in $dir/artifacts, log $dir/mlflow.log"
if [ "$basic_auth" = 1 ]; then
    echo "basic auth:   user admin, password in $dir/admin.password: give it as" \
         "http://admin:PASSWORD@127.0.0.1:$port or MLFLOW_TRACKING_USERNAME/PASSWORD"
fi
echo "tracking URI: http://127.0.0.1:$port"
echo "ready (Ctrl-C stops both)"
# until one of them ends (then this script ends too, and stops the other) or a signal comes
set +e
wait -n "$pg_pid" "$mlflow_pid"
rc=$?
set -e
kill -0 "$pg_pid" 2>/dev/null || echo "mlflow_server.sh: PostgreSQL exited, see $dir/postgres.log" >&2
kill -0 "$mlflow_pid" 2>/dev/null || echo "mlflow_server.sh: the MLflow server exited, see $dir/mlflow.log" >&2
exit $((rc == 0 ? 1 : rc))
