"""Dialect conformance suites for jobgate.

Each suite is a list of scenarios that run over real sockets against any host:port, so the same
scenario can be played against a reference server (beanstalkd 1.12) and against jobgate and the
replies compared byte for byte.

Modules:

- ``framing``           beanstalk reply framing and the blocking socket reader used by the runner.
- ``scenario``          the scenario data model (steps, read modes, expectations) and the runner.
- ``servers``           start/stop a server process on a free 127.0.0.1 port.
- ``normalize``         masking of volatile stats values and comparison of step outcomes.
- ``known_differences`` the documented, intended differences of jobgate (D1..D5) as data.
- ``beanstalk``         the beanstalk scenario suite registry and its CLI (check one server).
- ``differential``      beanstalkd vs jobgate, scenario by scenario, and its CLI.
- ``workq``             the workq scenario suite (golden transcript + extras) and its CLI.
- ``workq_client``      a small blocking workq client and the workq reply framing.
- ``workq_known_differences`` jobgate's deliberate differences from workq (W1..W8) as data.
- ``workq_scenarios_*`` the workq scenarios, by section, and their building blocks (common).
- ``glidemq``           the glide-mq over RESP golden replay (228 steps) and its CLI.
- ``glidemq_golden``    the glide-mq golden file: sections, steps, commands, placeholders.
- ``glidemq_notation``  the golden's typed reply notation (``Node`` trees) and R's Python reprs.
- ``glidemq_resp``      a small typed RESP2/RESP3 decoder and blocking connection.
- ``glidemq_compare``   golden vs live replies with the golden's normalisation.
- ``glidemq_pyclient``  the golden's redis-py section (R), played with redis-py.
- ``glidemq_runner``    plays the steps on their connections and judges them.
- ``glidemq_known_differences`` jobgate's deliberate glide-mq differences (KNOWN,
  JOBGATE_EXPECTS) as data.
"""
