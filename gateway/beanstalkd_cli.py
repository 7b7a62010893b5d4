"""`jobgate-beanstalkd`: jobgate with beanstalkd's command line, so an init script can swap binaries.

    jobgate-beanstalkd [-b DIR] [-f MS] [-F] [-l ADDR] [-p PORT] [-u USER] [-z BYTES] [-s BYTES]
                       [-c] [-n] [-v] [-V] [-h]

-l ADDR: listen address (default 0.0.0.0, like beanstalkd); `-l unix:/path` for a unix socket.
-p PORT: TCP port (default 11300). -b DIR: keep jobs in DIR/jobgate.db (SQLite) with commit
durability; without -b jobs live in memory only, as beanstalkd without -b. -f MS: accepted; -f 0
selects SQLite synchronous=FULL (fsync every commit), other values the default NORMAL.
-F: accepted (never fsync: NORMAL). -z BYTES: max job size (default 65535). -s BYTES: binlog size,
accepted and ignored. -c / -n: accepted and ignored (beanstalkd compaction flags). -u USER: become
USER (and its groups) right after binding, before any file is created, as beanstalkd does (its
main.c: make_server_socket, su, then the binlog directory); DIR must exist, as for beanstalkd.
-v: print version and exit. -V: more verbose logs (-V -V: debug, with tracebacks).
Socket activation (systemd, sd_listen_fds(3)), as beanstalkd: a listening socket passed in
$LISTEN_FDS / $LISTEN_PID is served instead of binding, -l and -p are then ignored (said on
stderr); of several, only the first is used; one that is not a TCP or unix listening socket
stops the start (status 3). So Debian's beanstalkd.socket + beanstalkd.service work with
jobgate-beanstalkd in ExecStart.
A start-up failure is one line on stderr naming the flag, its value and the cause. Exit status
(gateway/startup.py, docs/operations.md): 0 after SIGTERM/SIGINT, 1 another server uses DIR,
3 cannot listen, 4 the database in DIR is unusable, 5 a bad option (beanstalkd's usage status),
6 cannot become USER, 7 DIR missing or not writable.
"""
from __future__ import annotations

import getopt
import os
import socket
import sys

PROG = "jobgate-beanstalkd"

USAGE = """Use: jobgate-beanstalkd [OPTIONS]

Options:
 -b DIR   write-ahead log directory (SQLite database DIR/jobgate.db)
 -f MS    fsync at most once every MS milliseconds (use -f0 for "always fsync")
 -F       never fsync
 -l ADDR  listen on address (default is 0.0.0.0); unix:/path for a unix socket
 -p PORT  listen on port (default is 11300)
 -u USER  become user and group
 -z BYTES set the maximum job size in bytes (default is 65535)
 -s BYTES set the size of each write-ahead log file (accepted, ignored)
 -c       compact the binlog (accepted, ignored)
 -n       do not compact the binlog (accepted, ignored)
 -v       show version information
 -V       increase verbosity
 -h       show this help
"""


def _num(opt: str, v: str, hi: int) -> int:
    if not v.isdigit() or int(v) > hi:
        print(f"jobgate-beanstalkd: invalid value for {opt}: {v!r}", file=sys.stderr)
        sys.exit(5)
    return int(v)


def parse(argv) -> tuple:
    """Turn beanstalkd flags into a gateway.config.Config; returns (config, user to become or
    None). Exits with status 5 on a bad option, 0 after -v / -h."""
    from .config import Config, Listener
    try:
        opts, rest = getopt.getopt(argv, "b:f:Fl:p:u:z:s:cnvVh")
    except getopt.GetoptError as e:
        print(f"jobgate-beanstalkd: {e}\n{USAGE}", file=sys.stderr)
        sys.exit(5)
    if rest:
        print(f"jobgate-beanstalkd: unknown argument {rest[0]!r}\n{USAGE}", file=sys.stderr)
        sys.exit(5)
    cfg = Config()
    cfg.durability = "memory"
    cfg.log_level = "warning"
    host, port, user, verbose = "0.0.0.0", 11300, None, 0
    for o, v in opts:
        if o == "-b":     # not created here: a missing directory is an error (startup.py)
            cfg.database_url = "sqlite:///" + os.path.abspath(os.path.join(v, "jobgate.db"))
            cfg.durability = "commit"
        elif o == "-f":
            if _num(o, v, 2**31) == 0:
                cfg.sqlite_synchronous = "full"
        elif o == "-l":
            host = v
        elif o == "-p":
            port = _num(o, v, 65535)
        elif o == "-u":
            user = v
        elif o == "-z":
            cfg.options["beanstalk"]["max_job_size"] = _num(o, v, 2**32 - 1)
        elif o == "-v":
            from .version import version
            print(f"beanstalkd 1.12 (jobgate {version()})")
            sys.exit(0)
        elif o == "-V":
            verbose += 1
        elif o == "-h":
            print(USAGE)
            sys.exit(0)
    cfg.log_level = ("warning", "info", "debug")[min(verbose, 2)]
    if host.startswith("unix:"):
        cfg.listeners = [Listener("beanstalk", unix=host[5:])]
    else:
        cfg.listeners = [Listener("beanstalk", host, port)]
    return cfg, user


def _listen_address(argv) -> tuple | None:
    """(host, port) of the -l / -p flags, read before anything else is imported so that the
    socket listens within milliseconds of exec; None when the flags are malformed or -v / -h
    is given (parse() then reports or answers them)."""
    try:
        opts, rest = getopt.getopt(argv, "b:f:Fl:p:u:z:s:cnvVh")
    except getopt.GetoptError:
        return None
    host, port = "0.0.0.0", 11300
    for o, v in opts:
        if o in ("-v", "-h"):
            return None
        if o == "-l":
            host = v
        elif o == "-p":
            if not v.isdigit() or int(v) > 65535:
                return None
            port = int(v)
        elif o in ("-f", "-z", "-s") and not v.isdigit():
            return None   # a bad number is reported (status 5) before anything is bound,
            #               as beanstalkd parses every option first
    return None if rest else (host, port)


def _adopt_inherited(fds: list, argv) -> tuple:
    """The first socket systemd passed and its Listener (gateway.listen.adopt), saying on
    stderr what is ignored, as beanstalkd does. Raises ValueError when it is not a listening
    socket."""
    from .config import Listener
    from .listen import adopt
    if len(fds) > 1:
        print(f"{PROG}: inherited more than one listen socket; ignoring all but the first",
              file=sys.stderr)
    sock = adopt(fds[0])
    for o, v in getopt.getopt(argv, "b:f:Fl:p:u:z:s:cnvVh")[0]:
        if o in ("-l", "-p"):
            print(f"{PROG}: inherited listen fd; ignoring option: {o} {v}", file=sys.stderr)
    if sock.family == socket.AF_UNIX:
        name = sock.getsockname()
        return sock, Listener("beanstalk", unix=name if isinstance(name, str) else repr(name))
    host, port = sock.getsockname()[:2]
    return sock, Listener("beanstalk", host, port)


def main(argv=None) -> int:
    """Entry point of the `jobgate-beanstalkd` console script. The listening socket is bound
    first (gateway/listen.py); a client that connects during start-up is answered once the
    server serves. Then -u drops privileges, and only then is the -b database opened, so every
    file is created by USER. Exit statuses: the module docstring."""
    from .startup import (EXIT_LISTEN, EXIT_LOCKED, EXIT_OK, StartupError, become, bind_all,
                          preload, report)
    argv = sys.argv[1:] if argv is None else argv
    addr = _listen_address(argv)
    sock = activated = None
    debug = argv.count("-V") >= 2
    if addr is not None:
        from .config import Listener
        from .listen import catch_stop_signals, inherited_fds
        host, port = addr
        catch_stop_signals()
        fds = inherited_fds()
        if fds:
            try:
                sock, activated = _adopt_inherited(fds, argv)
            except ValueError as e:
                print(f"{PROG}: {e}", file=sys.stderr)
                return EXIT_LISTEN
        else:
            lst = (Listener("beanstalk", unix=host[5:]) if host.startswith("unix:")
                   else Listener("beanstalk", host, port))
            flags = f"-l {host}" if lst.unix else f"-l {host} -p {port}"
            try:
                sock = bind_all([lst], lambda _: "")[0]
            except StartupError as e:
                report(PROG, e.line(PROG, "", flags), e, debug)
                return e.status
    cfg, user = parse(argv)
    if activated is not None:
        cfg.listeners = [activated]
    debug = cfg.log_level == "debug"
    binlog = os.path.dirname(cfg.database_url.removeprefix("sqlite:///"))
    from core.api import StoreLocked
    try:
        if user:     # load the code first: USER may not be able to read the installation
            preload(cfg.durability != "memory")
            become(user)
        from .logs import setup
        setup(cfg.log_level, "text")
        from .server import run
        run(cfg, sockets=None if sock is None else [sock])
    except StartupError as e:
        report(PROG, e.line(PROG) if e.setting else e.line(PROG, "-b", binlog), e, debug)
        return e.status
    except StoreLocked as e:
        report(PROG, f"{PROG}: -b {binlog}: {e}", e, debug)
        return EXIT_LOCKED
    return EXIT_OK

if __name__ == "__main__":
    sys.exit(main())
