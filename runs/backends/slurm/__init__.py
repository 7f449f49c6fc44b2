"""The Slurm backend: a run's DAG nodes as Slurm jobs (docs/slurm.md).

``backend`` the backend and its poll, ``polling`` what a poll asks Slurm of the jobs
(adopted, stuck, gone), ``submitting`` the submission of due jobs, ``nodes`` the DAG of a run,
``script`` a job's batch script and ``sbatch`` arguments, ``status`` what Slurm's answers mean,
``state`` the ledger of a run's jobs, ``joblogs`` the logs the jobs write in the store,
``commands`` the one way Slurm is called. Imports nothing of the other backends.
"""
