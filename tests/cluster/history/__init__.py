"""A Jepsen-style history checker for a replicated Odradek cluster (issue 18).

* :mod:`.workload`: producers and consumers (confluent-kafka) recording every step to a JSON-lines history;
* :mod:`.nemesis`: faults on a seeded schedule (SIGKILL/restart, SIGSTOP/SIGCONT, isolation, ZooKeeper restart);
* :mod:`.checker`: lost, duplicated, reordered, vanished records, offsets going backwards, unavailability;
* :mod:`.run`: one run end to end; ``python -m tests.cluster.history.run --seed N --duration S --out DIR``.
"""
