"""The local backend: a run's tasks as processes of this machine (``backend``, the class the
protocol sees), its workflow's nodes made from the tasks (``nodes``), kept in files
(``submissions``, ``state``) and started by a step (``step``) as the machine's cores and memory
admit them (``admission``). Each attempt is launched (``launch``) detached by ``launcher`` (a
script) from its launch file (``launch_file``), prepared and started (``prepare``) in its cgroups
(``cgroups``) as its owner's task user (``user``), in the venv of its environment (``env``),
within its budgets of disk and /dev/shm (``budget``, ``shm``); what a plain command cannot write
itself the launcher writes (``plain_command``). Its processes are found and signalled from their
pid files (``processes``, ``pids``), its logs read from the store (``logs``), its step woken by
the launchers (``wake``), and ``serve``'s banner says what it shares (``banner``)."""
