"""``spec.template`` and ``spec.rack`` applied to a pod template the operator built (pure).

One function, :func:`customise`, takes the operator's StatefulSet pod template and returns it with
the user's additions; the operator's own fields win where both name the same thing (labels that
select the pods), the user's win where they only tune a default (security context keys).
"""

from __future__ import annotations

import copy
from typing import Any

from ferrymq_operator.template_models import PodTemplate, RackSpec

_ANTI = "podAntiAffinity"


def rack_spread(rack: RackSpec | None, match_labels: dict[str, str]) -> list[dict[str, Any]]:
    """One topology spread constraint over ``rack.topologyKey`` for the pods of ``match_labels``
    (a broker group or the NameServers): maxSkew 1 puts a master and its slave in two zones."""
    if rack is None:
        return []
    return [
        {
            "maxSkew": 1,
            "topologyKey": rack.topology_key,
            "whenUnsatisfiable": rack.when_unsatisfiable,
            "labelSelector": {"matchLabels": dict(match_labels)},
        }
    ]


def rack_node_affinity(rack: RackSpec | None) -> dict[str, Any]:
    """Only nodes that carry the zone label (Strimzi does the same): a node without it would
    count as a zone of its own and defeat the spread."""
    if rack is None:
        return {}
    term = {"matchExpressions": [{"key": rack.topology_key, "operator": "Exists"}]}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


def _merge_affinity(ours: dict[str, Any], theirs: dict[str, Any] | None) -> dict[str, Any]:
    """Node and pod affinity come from one side each (ours only for the rack); anti-affinity terms
    of both sides are kept, so the operator's hostname spread always applies."""
    out = copy.deepcopy(ours)
    for key, value in (theirs or {}).items():
        if key == _ANTI:
            anti = out.setdefault(_ANTI, {})
            for rule, terms in value.items():
                anti[rule] = [*anti.get(rule, []), *copy.deepcopy(terms)]
        elif key == "nodeAffinity" and key in out:
            out[key] = _merge_node_affinity(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge_node_affinity(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """The rack's required term is ANDed into each of the user's nodeSelectorTerms (terms are
    ORed by Kubernetes, expressions inside a term ANDed)."""
    out = copy.deepcopy(theirs)
    required_key = "requiredDuringSchedulingIgnoredDuringExecution"
    rack_terms = ours[required_key]["nodeSelectorTerms"]
    rack_exprs = [e for t in rack_terms for e in t.get("matchExpressions", [])]
    user_terms = (out.get(required_key) or {}).get("nodeSelectorTerms")
    if not user_terms:
        out[required_key] = copy.deepcopy(ours[required_key])
        return out
    out[required_key] = {
        "nodeSelectorTerms": [
            {**t, "matchExpressions": [*t.get("matchExpressions", []), *rack_exprs]}
            for t in user_terms
        ]
    }
    return out


def customise(
    pod_template: dict[str, Any],
    template: PodTemplate,
    rack: RackSpec | None,
    match_labels: dict[str, str],
) -> dict[str, Any]:
    """``pod_template`` (metadata + spec, first container the main one) with the user's template
    and the rack placement; a new dict, the input is left alone."""
    out = copy.deepcopy(pod_template)
    meta, spec = out["metadata"], out["spec"]
    meta["labels"] = {**template.metadata.labels, **meta.get("labels", {})}
    if template.metadata.annotations:
        meta["annotations"] = {**template.metadata.annotations, **meta.get("annotations", {})}
    if template.service_account_name:
        spec["serviceAccountName"] = template.service_account_name
    if template.priority_class_name:
        spec["priorityClassName"] = template.priority_class_name
    affinity = _merge_affinity(
        _merge_affinity(spec.get("affinity", {}), rack_node_affinity(rack)), template.affinity
    )
    if affinity:
        spec["affinity"] = affinity
    spread = rack_spread(rack, match_labels) + copy.deepcopy(template.topology_spread_constraints)
    if spread:
        spec["topologySpreadConstraints"] = spread
    if template.tolerations:
        spec["tolerations"] = [*spec.get("tolerations", []), *copy.deepcopy(template.tolerations)]
    if template.volumes:
        spec["volumes"] = [*spec.get("volumes", []), *copy.deepcopy(template.volumes)]
    if template.security_context:
        spec["securityContext"] = {**spec.get("securityContext", {}), **template.security_context}
    container = spec["containers"][0]
    if template.env:
        container["env"] = [*container.get("env", []), *copy.deepcopy(template.env)]
    if template.volume_mounts:
        container["volumeMounts"] = [
            *container.get("volumeMounts", []),
            *copy.deepcopy(template.volume_mounts),
        ]
    if template.container_security_context:
        container["securityContext"] = {
            **container.get("securityContext", {}),
            **template.container_security_context,
        }
    return out
