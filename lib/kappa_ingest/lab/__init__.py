"""A cluster of hosts on one machine, for tests, ``make bench`` and users who want to see
what a link does to a run before they buy one (needs root).

- ``net``    hosts as network namespaces on one bridge: links cut, cut between two hosts,
             rate-shaped with tbf
- ``proxy``  the TCP proxy that gives a link its delay (this kernel has no netem)
- ``hosts``  a lab: brokers on hosts of their own, each behind its proxy, and a driver host
"""
