# The official client is only partly annotated; this module is the typed boundary around it.
# mypy: disable-error-code="no-untyped-call"
"""The only module that calls the Kubernetes API.

Policy for API answers, in one place:

* 404 on read/delete: the object is absent (``None`` / ``False``), not an error;
* 409 on apply cannot happen for our own fields (server-side apply with ``force``), elsewhere it is
  transient (someone wrote first; retry);
* 400/403/422: the request itself is wrong (a spec the API refuses, missing RBAC): :class:`Rejected`,
  reported to the user as a condition, not retried in a loop;
* everything else (5xx, 429, connection errors): :class:`Transient`, retried with a delay.

The official client is synchronous, so every call runs in a worker thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import enum
import os
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import (
    BadRequestError,
    ConflictError,
    DynamicApiError,
    ForbiddenError,
    NotFoundError,
    ResourceNotFoundError,
    UnprocessibleEntityError,
)


class ApiError(Exception):
    """A Kubernetes API call failed."""


class Rejected(ApiError):
    """The API refused the request as invalid or forbidden; retrying the same request won't help."""


class Transient(ApiError):
    """The API could not answer now (server error, throttling, network); retry later."""


class Outcome(enum.Enum):
    CREATED = "created"
    CONFIGURED = "configured"
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class ApiVersions:
    """API versions picked by discovery, e.g. policy/v1 (1.21+) or policy/v1beta1 (1.20)."""

    pdb: str
    cronjob: str


def api_client_from(kubeconfig: str | None) -> k8s_client.ApiClient:
    """In-cluster service account when running in a pod, else a kubeconfig file."""
    if kubeconfig is None:
        try:
            configuration = k8s_client.Configuration()
            k8s_config.load_incluster_config(client_configuration=configuration)
            return k8s_client.ApiClient(configuration)
        except k8s_config.ConfigException:
            pass
    # The client reads $KUBECONFIG once at import; read it now so a later setting counts.
    path = kubeconfig or os.environ.get("KUBECONFIG") or None
    api_client: k8s_client.ApiClient = k8s_config.new_client_from_config(config_file=path)
    return api_client


def _message(error: DynamicApiError) -> str:
    summary: str = error.summary()
    return summary


def _translate(error: Exception, what: str) -> ApiError:
    if isinstance(error, BadRequestError | ForbiddenError | UnprocessibleEntityError):
        return Rejected(f"{what}: {_message(error)}")
    if isinstance(error, DynamicApiError):
        return Transient(f"{what}: {_message(error)}")
    return Transient(f"{what}: {error}")


def _changed(before: Any, after: Any) -> bool:
    """Did an apply change the object? By generation where the kind has one (a status update
    between our read and our apply bumps resourceVersion, not generation), else resourceVersion."""
    if getattr(before, "generation", None) is not None:
        return bool(before.generation != after.generation)
    return bool(before.resourceVersion != after.resourceVersion)


class Kube:
    """Typed, asynchronous facade over the dynamic client (one per operator process)."""

    def __init__(self, api_client: k8s_client.ApiClient, field_manager: str) -> None:
        self._api_client = api_client
        self._field_manager = field_manager
        self._dynamic: DynamicClient | None = None

    @classmethod
    async def connect(cls, kubeconfig: str | None, field_manager: str) -> Kube:
        api_client = await asyncio.to_thread(api_client_from, kubeconfig)
        kube = cls(api_client, field_manager)
        await asyncio.to_thread(kube._client)
        return kube

    def close(self) -> None:
        self._api_client.close()

    def _client(self) -> DynamicClient:
        if self._dynamic is None:
            self._dynamic = DynamicClient(self._api_client)
        return self._dynamic

    def _resource(self, api_version: str, kind: str) -> Any:
        try:
            return self._client().resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError as error:
            raise Rejected(f"the API server does not serve {kind} in {api_version}") from error

    # --- discovery ---

    def _serves(self, api_version: str, kind: str) -> bool:
        try:
            self._client().resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            return False
        return True

    async def serves(self, api_version: str, kind: str) -> bool:
        try:
            return await asyncio.to_thread(self._serves, api_version, kind)
        except DynamicApiError as error:
            raise _translate(error, f"discovery of {kind}") from error

    async def pick_version(self, kind: str, candidates: tuple[str, ...]) -> str:
        """First of ``candidates`` (newest first) the server serves ``kind`` in."""
        for api_version in candidates:
            if await self.serves(api_version, kind):
                return api_version
        raise Rejected(f"the API server serves {kind} in none of {', '.join(candidates)}")

    async def discover(self) -> ApiVersions:
        return ApiVersions(
            pdb=await self.pick_version("PodDisruptionBudget", ("policy/v1", "policy/v1beta1")),
            cronjob=await self.pick_version("CronJob", ("batch/v1", "batch/v1beta1")),
        )

    # --- objects ---

    def _get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        resource = self._resource(api_version, kind)
        try:
            obj = self._client().get(resource, name=name, namespace=namespace)
        except NotFoundError:
            return None
        result: dict[str, Any] = obj.to_dict()
        return result

    async def get(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        try:
            return await asyncio.to_thread(self._get, api_version, kind, namespace, name)
        except DynamicApiError as error:
            raise _translate(error, f"get {kind} {namespace}/{name}") from error

    def _list(
        self, api_version: str, kind: str, namespace: str, selector: str
    ) -> list[dict[str, Any]]:
        resource = self._resource(api_version, kind)
        result = self._client().get(resource, namespace=namespace, label_selector=selector)
        items: list[dict[str, Any]] = result.to_dict().get("items", [])
        return items

    async def list(
        self, api_version: str, kind: str, namespace: str, selector: str
    ) -> list[dict[str, Any]]:
        try:
            return await asyncio.to_thread(self._list, api_version, kind, namespace, selector)
        except DynamicApiError as error:
            raise _translate(error, f"list {kind} in {namespace}") from error

    def _apply(self, obj: dict[str, Any]) -> Outcome:
        meta = obj["metadata"]
        resource = self._resource(obj["apiVersion"], obj["kind"])
        client = self._client()
        try:
            before = client.get(resource, name=meta["name"], namespace=meta["namespace"])
        except NotFoundError:
            before = None
        after = client.server_side_apply(
            resource,
            body=obj,
            name=meta["name"],
            namespace=meta["namespace"],
            field_manager=self._field_manager,
            force_conflicts=True,
        )
        if before is None:
            return Outcome.CREATED
        return (
            Outcome.CONFIGURED if _changed(before.metadata, after.metadata) else Outcome.UNCHANGED
        )

    async def apply(self, obj: dict[str, Any]) -> Outcome:
        """Server-side apply (create or update; our field manager owns the fields we set)."""
        what = f"apply {obj['kind']} {obj['metadata']['namespace']}/{obj['metadata']['name']}"
        try:
            return await asyncio.to_thread(self._apply, obj)
        except DynamicApiError as error:
            raise _translate(error, what) from error

    def _create(self, obj: dict[str, Any]) -> bool:
        resource = self._resource(obj["apiVersion"], obj["kind"])
        try:
            self._client().create(resource, body=obj, namespace=obj["metadata"]["namespace"])
        except ConflictError:
            return False
        return True

    async def create(self, obj: dict[str, Any]) -> bool:
        """Create only; False when it already exists (who created it first wins, e.g. one random
        key shared by several custom resources)."""
        what = f"create {obj['kind']} {obj['metadata']['namespace']}/{obj['metadata']['name']}"
        try:
            return await asyncio.to_thread(self._create, obj)
        except DynamicApiError as error:
            raise _translate(error, what) from error

    def _delete(
        self, api_version: str, kind: str, namespace: str, name: str, propagation: str | None
    ) -> bool:
        resource = self._resource(api_version, kind)
        try:
            self._client().delete(
                resource, name=name, namespace=namespace, propagation_policy=propagation
            )
        except NotFoundError:
            return False
        return True

    async def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        propagation: str | None = None,
    ) -> bool:
        """Delete; False when it was already gone.

        ``propagation`` ("Background", "Foreground", "Orphan") says what happens to the objects the
        deleted one owns. Unset, the kind's default applies, and for some kinds that is Orphan
        (batch/v1beta1 CronJob on 1.20 leaves its Jobs and their pods behind).
        """
        try:
            return await asyncio.to_thread(
                self._delete, api_version, kind, namespace, name, propagation
            )
        except DynamicApiError as error:
            raise _translate(error, f"delete {kind} {namespace}/{name}") from error

    def _patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: dict[str, Any]
    ) -> bool:
        resource = self._resource(api_version, kind)
        try:
            self._client().patch(
                resource.status,
                body={"status": status},
                name=name,
                namespace=namespace,
                content_type="application/merge-patch+json",
            )
        except NotFoundError:
            return False
        return True

    async def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: dict[str, Any]
    ) -> bool:
        """Merge-patch the status subresource; False when the object is gone."""
        try:
            return await asyncio.to_thread(
                self._patch_status, api_version, kind, namespace, name, status
            )
        except DynamicApiError as error:
            raise _translate(error, f"status of {kind} {namespace}/{name}") from error

    def _patch(
        self, api_version: str, kind: str, namespace: str, name: str, body: dict[str, Any]
    ) -> bool:
        resource = self._resource(api_version, kind)
        try:
            self._client().patch(
                resource,
                body=body,
                name=name,
                namespace=namespace,
                content_type="application/merge-patch+json",
            )
        except NotFoundError:
            return False
        return True

    async def patch(
        self, api_version: str, kind: str, namespace: str, name: str, body: dict[str, Any]
    ) -> bool:
        """Merge-patch (fields the operator does not own, e.g. a claim's size); False when the
        object is gone."""
        try:
            return await asyncio.to_thread(self._patch, api_version, kind, namespace, name, body)
        except DynamicApiError as error:
            raise _translate(error, f"patch {kind} {namespace}/{name}") from error

    async def patch_annotations(
        self, api_version: str, kind: str, namespace: str, name: str, values: dict[str, str | None]
    ) -> bool:
        """Merge-patch annotations (None removes one); False when the object is gone."""
        try:
            return await asyncio.to_thread(
                self._patch,
                api_version,
                kind,
                namespace,
                name,
                {"metadata": {"annotations": values}},
            )
        except DynamicApiError as error:
            raise _translate(error, f"annotations of {kind} {namespace}/{name}") from error
