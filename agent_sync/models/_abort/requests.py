"""The ``requests`` transport adapter whose requests :func:`~.urllib3.abort_on_cancel` aborts."""

from __future__ import annotations

from typing import Any

from requests.adapters import HTTPAdapter

from .urllib3 import make_pool_manager_abortable

__all__ = ["AbortableHTTPAdapter"]


class AbortableHTTPAdapter(HTTPAdapter):
    """A ``requests`` transport adapter whose requests :func:`~.urllib3.abort_on_cancel` can abort.

    Mount it on a session (``session.mount("https://", AbortableHTTPAdapter())``). Requests
    made outside ``abort_on_cancel`` behave exactly like with ``HTTPAdapter``. Thread-safe
    as ``HTTPAdapter`` is: each request claims its own connection.
    """

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        make_pool_manager_abortable(self.poolmanager)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if not proxy.lower().startswith("socks"):  # SOCKS connection classes are not ours
            make_pool_manager_abortable(manager)
        return manager

    def close(self) -> None:
        """Close idle pooled connections, then forget the pools.

        urllib3 2.8's ``PoolManager.clear()`` only drops its pools (no ``dispose_func``),
        which leaves idle keep-alive sockets open until garbage collection. Closing a pool
        only closes the connections *in* it, so requests still in flight are not touched.
        """
        for manager in (self.poolmanager, *self.proxy_manager.values()):
            for key in list(manager.pools.keys()):
                pool = manager.pools.get(key)
                if pool is not None:
                    pool.close()
        super().close()
