"""The checks of Pod Security Standards' "restricted" profile (Kubernetes' pod-security
admission, latest), over a pod spec as the API server would admit it."""

from __future__ import annotations

from typing import Any

ALLOWED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "image",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
ALLOWED_SECCOMP = frozenset({"RuntimeDefault", "Localhost"})


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    """What a pod spec breaks of the restricted profile; [] when it is admitted."""
    found = []
    pod = spec.get("securityContext") or {}
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag):
            found.append(f"{flag} is set")
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            found.append(f"volume {volume['name']} is of a kind not allowed: {sorted(kinds)}")
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    for container in containers:
        name = container["name"]
        own = container.get("securityContext") or {}
        if own.get("privileged"):
            found.append(f"{name} is privileged")
        if own.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name} does not forbid privilege escalation")
        capabilities = own.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            found.append(f"{name} does not drop ALL capabilities")
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(f"{name} adds capabilities")
        if not own.get("runAsNonRoot", pod.get("runAsNonRoot")):
            found.append(f"{name} may run as root (runAsNonRoot)")
        if own.get("runAsUser", pod.get("runAsUser")) == 0:
            found.append(f"{name} runs as user 0")
        seccomp = (own.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
        if seccomp not in ALLOWED_SECCOMP:
            found.append(f"{name} has no RuntimeDefault or Localhost seccomp profile")
        if any(port.get("hostPort") for port in container.get("ports") or []):
            found.append(f"{name} uses a host port")
    return found


BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)


def baseline_violations(spec: dict[str, Any]) -> list[str]:
    """What a pod spec breaks of the baseline profile; [] when it is admitted."""
    found = []
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag):
            found.append(f"{flag} is set")
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            found.append(f"volume {volume['name']} is a hostPath")
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        own = container.get("securityContext") or {}
        if own.get("privileged"):
            found.append(f"{container['name']} is privileged")
        if set((own.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES:
            found.append(f"{container['name']} adds capabilities beyond the baseline")
        if any(port.get("hostPort") for port in container.get("ports") or []):
            found.append(f"{container['name']} uses a host port")
    return found


def violations(level: str, spec: dict[str, Any]) -> list[str]:
    """What a pod spec breaks of a namespace's enforced level (privileged: nothing)."""
    if level == "restricted":
        return restricted_violations(spec)
    if level == "baseline":
        return baseline_violations(spec)
    return []
