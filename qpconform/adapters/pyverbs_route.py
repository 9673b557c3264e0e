"""The device a pair's end modifies through, with its address vectors pointed at the peer:
PyverbsQP.modify builds the AV from its device, and an end of a pair (on one device or two)
must reach the other end's GID, not its own."""

from __future__ import annotations

from typing import Any


class Routed:
    """The QP's device as seen by PyverbsQP.modify, with AVs pointing at the peer's GID."""

    def __init__(self, device: Any, peer_gid: Any) -> None:
        self._device = device
        self._peer_gid = peer_gid

    def __getattr__(self, name: str) -> Any:
        return getattr(self._device, name)

    def ah_attr(self, port_num: int, sgid_index: int) -> Any:
        addr = self._device.pv.addr
        gr = addr.GlobalRoute(dgid=self._peer_gid, sgid_index=sgid_index)
        return addr.AHAttr(port_num=port_num, is_global=1, gr=gr, dlid=0)
