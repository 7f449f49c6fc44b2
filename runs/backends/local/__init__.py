"""The local backend: a run's tasks as processes of this machine (``backend``), admitted to its
cores and memory (``admission``), each started detached by ``launcher`` (a script) in its cgroups
(``cgroups``) as its owner's task user (``user``), in the venv of its environment (``env``),
within its budgets of disk and /dev/shm (``budget``, ``shm``); its state in files
(``state``), its step woken by the launchers (``wake``)."""
