"""The Argo backend: a run is an Argo Workflow whose pods Kueue admits (``backend``), rendered
by ``manifest``, read by ``status`` and ``watch``, its images built in the cluster (``build``,
``registry``), its nodes chosen and reserved (``nodes``), the cluster's versions checked
(``versions``), every call bounded and retried (``api``). See docs/cluster.md."""
