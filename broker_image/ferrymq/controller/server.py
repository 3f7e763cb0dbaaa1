"""The controller process (upstream ``ControllerManager`` + ``ControllerRequestProcessor``), one
per deployment with a file store: ``ferrymq controller -c controller.conf``.

Everything runs on one event loop, so each request sees and changes the state atomically; an
answer (and any NOTIFY_BROKER_ROLE_CHANGED) leaves only after the changed state is on disk, so a
controller that crashes and restarts never contradicts what it told a broker. A controller that
is down elects nobody; brokers fence themselves (see ``ferrymq.broker.controller_mode``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable
from typing import Protocol

import orjson

from ferrymq.controller.config import DEFAULT_HEARTBEAT_TIMEOUT_MS, ControllerConfig
from ferrymq.controller.decisions import (
    Refused,
    Registration,
    check_alter_sync_state_set,
    elect_master,
    next_epoch,
    validate_registration,
)
from ferrymq.controller.protocol import ControllerRequestCode as Req
from ferrymq.controller.protocol import ControllerResponseCode as Resp
from ferrymq.controller.protocol import elect_master_body
from ferrymq.controller.state import (
    FileStateStore,
    GroupState,
    Replica,
    StateConflict,
    StateStore,
)
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.remoting.processor import AsyncHandler
from ferrymq.remoting.server import RemotingServer
from ferrymq.remoting.serving_marker import ServingMarker
from ferrymq.tasks import Periodic

log = logging.getLogger(__name__)


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class Leadership(Protocol):
    """Who may act among several controllers (see ``k8s_store.LeaseElector``); ``term`` grows
    with every acquisition, so a controller that (re)gains leadership reloads the state first."""

    term: int

    def is_leader(self) -> bool: ...

    def start(self) -> None: ...

    async def stop(self) -> None: ...


def _ext_int(request: RemotingCommand, name: str, default: int | None = None) -> int:
    raw = request.ext_fields.get(name)
    if raw is None or raw == "":
        if default is None:
            raise Refused(Resp.CONTROLLER_INVALID_REQUEST, f"missing header field {name}")
        return default
    try:
        return int(raw)
    except ValueError:
        raise Refused(
            Resp.CONTROLLER_INVALID_REQUEST, f"header field {name}={raw!r} is not an integer"
        ) from None


def _ext_str(request: RemotingCommand, name: str) -> str:
    value = request.ext_fields.get(name, "").strip()
    if not value:
        raise Refused(Resp.CONTROLLER_INVALID_REQUEST, f"missing header field {name}")
    return value


class ControllerServer:
    def __init__(
        self,
        config: ControllerConfig,
        *,
        clock: Callable[[], int] = _now_ms,
        store: StateStore | None = None,
        leadership: Leadership | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.store: StateStore = store or FileStateStore(config.controller_store_path)
        # None: the only controller (file store); else only the Lease holder answers and elects
        self.leadership = leadership
        self._loaded_term = 0
        self.groups: dict[str, GroupState] = {}
        self.server = RemotingServer(config.bind_address, config.listen_port, name="controller")
        self.client = RemotingClient(name="controller-notify")
        self.elections = 0
        self._scan = Periodic(
            "controller-scan",
            self.scan_once,
            lambda: self.config.scan_not_active_broker_interval / 1000,
        )
        self._notifies: set[asyncio.Task[None]] = set()
        handlers: dict[int, Callable[[RemotingCommand], object]] = {
            Req.CONTROLLER_REGISTER_BROKER: self._register,
            Req.BROKER_HEARTBEAT: self._heartbeat,
            Req.CONTROLLER_ALTER_SYNC_STATE_SET: self._alter_sync_state_set,
            Req.CONTROLLER_GET_REPLICA_INFO: self._get_replica_info,
            Req.CONTROLLER_ELECT_MASTER: self._elect_by_admin,
            Req.CONTROLLER_GET_SYNC_STATE_DATA: self._get_sync_state_data,
        }
        for code, handler in handlers.items():
            self.server.register(code, self._wrap(handler))
        self.server.register(Req.CONTROLLER_GET_METADATA_INFO, self._metadata)

    @property
    def port(self) -> int:
        return self.server.port

    def _wrap(self, handler: Callable[[RemotingCommand], object]) -> AsyncHandler:
        async def run(channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
            try:
                await self._ensure_leader()
                result = handler(request)
                if asyncio.iscoroutine(result):
                    result = await result
                assert isinstance(result, RemotingCommand)
                return result
            except Refused as exc:
                log.warning("refused %s: %s", Req(request.code).name, exc)
                return request.response(exc.code, str(exc))
            except Exception as exc:
                log.exception("controller request %d failed", request.code)
                return request.response(ResponseCode.SYSTEM_ERROR, f"controller error: {exc!r}")

        return run

    async def _ensure_leader(self) -> None:
        """Refuse unless we lead; on a new term, reload what the previous leader saved."""
        if self.leadership is None:
            return
        if not self.leadership.is_leader():
            raise Refused(Resp.CONTROLLER_NOT_LEADER, "this controller is not the leader")
        term = self.leadership.term
        if term != self._loaded_term:
            self.groups = await asyncio.to_thread(self.store.load, self.clock())
            self._loaded_term = term
            log.warning("controller leads (term %d) with %d group(s)", term, len(self.groups))

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        if isinstance(self.store, FileStateStore):
            self.config.controller_store_path.mkdir(parents=True, exist_ok=True)
        self.groups = await asyncio.to_thread(self.store.load, self.clock())
        if self.leadership is not None:
            self.leadership.start()
        await self.server.start()
        self._scan.start()
        log.info(
            "controller serving on %s:%d with %d group(s) from %s",
            self.config.bind_address,
            self.port,
            len(self.groups),
            self.store,
        )

    async def stop(self) -> None:
        await self._scan.stop()
        for task in list(self._notifies):
            task.cancel()
        if self.leadership is not None:
            await self.leadership.stop()
        await self.server.stop()
        await self.client.close()

    # --- helpers ----------------------------------------------------------------------------

    def _group(self, request: RemotingCommand) -> GroupState:
        name = _ext_str(request, "brokerName")
        group = self.groups.get(name)
        if group is None:
            raise Refused(
                Resp.CONTROLLER_BROKER_METADATA_NOT_EXIST, f"no broker group named {name}"
            )
        return group

    def _answer(self, request: RemotingCommand, group: GroupState) -> RemotingCommand:
        info = group.replica_info()
        return request.response(ResponseCode.SUCCESS, None, info.to_ext(), info.body())

    def _elect(self, group: GroupState, *, exclude: int | None, preferred: int | None) -> bool:
        """Elect from the alive SyncStateSet; True when the master changed (state not yet saved)."""
        chosen = elect_master(
            group.sync_state_set, group.views(self.clock()), exclude=exclude, preferred=preferred
        )
        if chosen is None:
            if group.master_id is not None and exclude == group.master_id:
                log.error(
                    "group %s: master %s is gone and no alive replica of the SyncStateSet %s "
                    "can take over; no master until one returns",
                    group.broker_name,
                    group.master_id,
                    sorted(group.sync_state_set),
                )
                group.master_id = None
                return True
            return False
        if chosen == group.master_id:
            return False
        old = group.master_id
        group.master_id = chosen
        group.master_epoch = next_epoch(group.master_epoch)
        # the new master starts alone; replicas rejoin as they catch up with it
        group.sync_state_set = {chosen}
        group.sync_state_set_epoch += 1
        self.elections += 1
        log.warning(
            "group %s: elected broker %d (was %s) as master, epoch %d",
            group.broker_name,
            chosen,
            old,
            group.master_epoch,
        )
        return True

    async def _commit(self, group: GroupState, changed_master: bool) -> None:
        try:
            await self.store.save(self.groups)
        except StateConflict as exc:
            # a newer leader wrote: drop our unsaved decision, reload before acting again
            self._loaded_term = -1
            raise Refused(Resp.CONTROLLER_NOT_LEADER, str(exc)) from None
        if changed_master and self.config.notify_broker_role_changed:
            self._notify(group)

    def _notify(self, group: GroupState) -> None:
        info = group.replica_info()
        for replica in group.replicas.values():
            request = RemotingCommand.request(
                Req.NOTIFY_BROKER_ROLE_CHANGED,
                {**info.to_ext(), "brokerName": group.broker_name},
                info.body(),
            )
            task = asyncio.get_running_loop().create_task(self._send_notify(replica.addr, request))
            self._notifies.add(task)
            task.add_done_callback(self._notifies.discard)

    async def _send_notify(self, addr: str, request: RemotingCommand) -> None:
        # best effort: a broker that misses it learns the same from its next heartbeat answer
        with contextlib.suppress(RemotingError, OSError, ValueError, TimeoutError):
            await self.client.invoke(addr, request, 1.0)

    def _maybe_elect_masterless(self, group: GroupState) -> bool:
        if group.master_id is not None:
            return False
        if group.master_epoch == 0:
            return False  # the first registration of a new group decides (see _register)
        return self._elect(group, exclude=None, preferred=None)

    # --- handlers ---------------------------------------------------------------------------

    async def _register(self, request: RemotingCommand) -> RemotingCommand:
        reg = Registration(
            cluster_name=request.ext_fields.get("clusterName", ""),
            broker_name=request.ext_fields.get("brokerName", ""),
            broker_id=_ext_int(request, "brokerId"),
            broker_addr=request.ext_fields.get("brokerAddr", ""),
            epoch=_ext_int(request, "epoch", 0),
        )
        group = self.groups.get(reg.broker_name.strip())
        now = self.clock()
        existing = group.replicas.get(reg.broker_id) if group else None
        live_addr = existing.addr if existing is not None and existing.alive(now) else None
        validate_registration(
            reg,
            group_cluster=group.cluster_name if group else None,
            group_epoch=group.master_epoch if group else 0,
            live_addr_of_id=live_addr,
        )
        if group is None:
            group = GroupState(reg.cluster_name.strip(), reg.broker_name.strip())
            self.groups[group.broker_name] = group
        replica = group.replicas.get(reg.broker_id)
        if replica is None:
            replica = group.replicas[reg.broker_id] = Replica(reg.broker_id, reg.broker_addr)
        replica.addr = reg.broker_addr
        replica.ha_addr = request.ext_fields.get("haAddress", replica.ha_addr)
        replica.last_heartbeat_ms = now
        replica.heartbeat_timeout_ms = _ext_int(
            request, "heartbeatTimeoutMills", DEFAULT_HEARTBEAT_TIMEOUT_MS
        )
        replica.max_offset = _ext_int(request, "maxOffset", -1)
        changed = False
        if group.master_id is None and group.master_epoch == 0:
            # a brand-new group: its first broker becomes the master of epoch 1
            group.master_id = reg.broker_id
            group.master_epoch = 1
            group.sync_state_set = {reg.broker_id}
            group.sync_state_set_epoch += 1
            self.elections += 1
            changed = True
            log.warning("group %s: first master is broker %d", group.broker_name, reg.broker_id)
        else:
            changed = self._maybe_elect_masterless(group)
        await self._commit(group, changed)
        log.info(
            "registered %s/%d at %s (master %s, epoch %d)",
            group.broker_name,
            reg.broker_id,
            reg.broker_addr,
            group.master_id,
            group.master_epoch,
        )
        return self._answer(request, group)

    async def _heartbeat(self, request: RemotingCommand) -> RemotingCommand:
        group = self._group(request)
        broker_id = _ext_int(request, "brokerId")
        replica = group.replicas.get(broker_id)
        if replica is None or replica.addr != request.ext_fields.get("brokerAddr", replica.addr):
            raise Refused(
                Resp.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"broker {group.broker_name}/{broker_id} is not registered; register first",
            )
        replica.last_heartbeat_ms = self.clock()
        replica.heartbeat_timeout_ms = _ext_int(
            request, "heartbeatTimeoutMills", replica.heartbeat_timeout_ms
        )
        replica.max_offset = _ext_int(request, "maxOffset", replica.max_offset)
        ha_addr = request.ext_fields.get("haAddress")
        dirty = False
        if ha_addr is not None and ha_addr != replica.ha_addr:
            replica.ha_addr = ha_addr
            dirty = True
        changed = self._maybe_elect_masterless(group)
        if changed or dirty:
            await self._commit(group, changed)
        return self._answer(request, group)

    async def _alter_sync_state_set(self, request: RemotingCommand) -> RemotingCommand:
        group = self._group(request)
        try:
            body = orjson.loads(request.body_bytes() or b"{}")
            new_set = {int(b) for b in body["syncStateSet"]}
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise Refused(
                Resp.CONTROLLER_INVALID_REQUEST, f"body must be {{'syncStateSet': [ids]}}: {exc!r}"
            ) from None
        check_alter_sync_state_set(
            master_id=group.master_id,
            master_epoch=group.master_epoch,
            sync_state_set_epoch=group.sync_state_set_epoch,
            known_ids=set(group.replicas),
            request_master_id=_ext_int(request, "masterBrokerId"),
            request_master_epoch=_ext_int(request, "masterEpoch"),
            request_sss_epoch=_ext_int(request, "syncStateSetEpoch"),
            new_set=new_set,
        )
        if new_set != group.sync_state_set:
            group.sync_state_set = new_set
            group.sync_state_set_epoch += 1
            log.info(
                "group %s: SyncStateSet %s (epoch %d)",
                group.broker_name,
                sorted(new_set),
                group.sync_state_set_epoch,
            )
            await self._commit(group, False)
        return self._answer(request, group)

    def _get_replica_info(self, request: RemotingCommand) -> RemotingCommand:
        return self._answer(request, self._group(request))

    async def _elect_by_admin(self, request: RemotingCommand) -> RemotingCommand:
        """Planned switchover (upstream ELECT_MASTER from mqadmin electMaster, designateElect):
        the named broker if it is an alive member of the SyncStateSet, else nobody; codes and
        remarks as upstream's ReplicasInfoManager.electMaster."""
        if _ext_str(request, "brokerName") not in self.groups:
            raise Refused(
                Resp.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, "Broker hasn't been registered"
            )
        group = self._group(request)
        preferred = _ext_int(request, "brokerId", -1)
        chosen = preferred if preferred > 0 else None
        if chosen is not None:
            views = group.views(self.clock())
            if chosen == group.master_id and views[chosen].alive:
                raise Refused(
                    Resp.CONTROLLER_MASTER_STILL_EXIST,
                    f"The old master {chosen} is still alive, not need to elect new master "
                    f"for broker {group.broker_name}",
                )
            if chosen not in group.sync_state_set or chosen not in views or not views[chosen].alive:
                # upstream's remark says no more; the log says why
                log.warning(
                    "group %s: broker %d is not an alive member of the SyncStateSet %s",
                    group.broker_name,
                    chosen,
                    sorted(group.sync_state_set),
                )
                raise Refused(Resp.CONTROLLER_ELECT_MASTER_FAILED, "Failed to elect a new master")
        changed = self._elect(group, exclude=None, preferred=chosen)
        await self._commit(group, changed)
        info = group.replica_info()
        body = elect_master_body(
            group.cluster_name,
            group.broker_name,
            {b: r.addr for b, r in group.replicas.items()},
            info.sync_state_set,
        )
        return request.response(ResponseCode.SUCCESS, None, info.to_ext(), body)

    def _metadata(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        """Upstream GetMetaDataResponseHeader (mqadmin getControllerMetaData; every mqadmin
        controller command asks it first for the leader's address). Any controller answers;
        its own address is the one the client reached it at."""
        me = self.config.controller_d_leger_self_id
        addr = channel.local_addr
        leads = self.leadership is None or self.leadership.is_leader()
        ext = {
            "group": self.config.controller_d_leger_group,
            "isLeader": str(leads).lower(),
            "peers": f"{me}:{addr}",
        }
        if leads:
            ext |= {"controllerLeaderId": me, "controllerLeaderAddress": addr}
        return request.response(ResponseCode.SUCCESS, None, ext)

    def _get_sync_state_data(self, request: RemotingCommand) -> RemotingCommand:
        now = self.clock()
        if request.body_bytes():
            # upstream's request (mqadmin getSyncStateSet): a JSON list of broker names, answered
            # with BrokerReplicasInfo; names the controller does not know are left out
            try:
                names = orjson.loads(request.body_bytes())
            except orjson.JSONDecodeError:
                names = None
            if not isinstance(names, list):
                raise Refused(
                    Resp.CONTROLLER_INVALID_REQUEST, "body must be a JSON list of broker names"
                )
            table = {
                name: self.groups[name].replicas_info(now)
                for name in names
                if isinstance(name, str) and name in self.groups
            }
            answer = orjson.dumps({"replicasInfoTable": table})
            return request.response(ResponseCode.SUCCESS, None, None, answer)
        # no body: every group in ferrymq's own shape (its tools and tests)
        body = {
            name: {
                **g.to_json(),
                "alive": sorted(b for b, r in g.replicas.items() if r.alive(now)),
            }
            for name, g in self.groups.items()
        }
        return request.response(ResponseCode.SUCCESS, None, None, orjson.dumps(body))

    # --- the scan for dead masters (upstream scanNotActiveBroker) ---------------------------

    async def scan_once(self) -> None:
        try:
            await self._ensure_leader()
        except Refused:
            return  # only the leader elects
        now = self.clock()
        for group in list(self.groups.values()):
            master = group.replicas.get(group.master_id) if group.master_id is not None else None
            if master is None or master.alive(now):
                continue
            log.warning(
                "group %s: master %d missed heartbeats for %d ms",
                group.broker_name,
                master.broker_id,
                now - master.last_heartbeat_ms,
            )
            if self._elect(group, exclude=master.broker_id, preferred=None):
                try:
                    await self._commit(group, True)
                except Refused as exc:
                    log.warning("election of group %s not saved: %s", group.broker_name, exc)
                    return


def build_controller(config: ControllerConfig) -> ControllerServer:
    """The file store, or (controllerStoreType=kubernetes) a ConfigMap + Lease on the API."""
    if config.controller_store_type == "file":
        return ControllerServer(config)
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        raise ValueError(
            "controllerStoreType=kubernetes needs the kubernetes package: "
            "pip install 'ferrymq[k8s-controller]'"
        ) from None
    from ferrymq.controller.k8s_store import (
        ConfigMapStateStore,
        LeaseElector,
        api_client,
        default_identity,
        pod_namespace,
    )

    namespace = config.controller_namespace or pod_namespace()
    client = api_client()
    return ControllerServer(
        config,
        store=ConfigMapStateStore(client, namespace, config.controller_state_config_map),
        leadership=LeaseElector(
            client,
            namespace,
            config.controller_lease_name,
            default_identity(),
            lease_duration_s=config.controller_lease_duration_seconds,
        ),
    )


async def serve(config: ControllerConfig) -> None:
    """Run a controller until SIGTERM or SIGINT."""
    controller = build_controller(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    marker: ServingMarker | None = None
    try:
        stale = ServingMarker.from_env(config.listen_port)
        if stale is not None:
            stale.clear()  # an earlier container's marker must not vouch for this start
        await controller.start()
        marker = ServingMarker.from_env(controller.port)
        if marker is not None:
            marker.start()  # the probes' evidence that the controller serves
        print(f"Controller ready on port {controller.port}", flush=True)
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        if marker is not None:
            await marker.stop()
        await controller.stop()
