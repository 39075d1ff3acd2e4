"""Per-request socket aborts: how ``cancel()`` reaches a thread blocked in an HTTP client.

A thread blocked in httpx2 or urllib3 (connecting, in the TLS handshake, waiting for
response headers, or reading a silent body) is not woken by closing the response object
from another thread (measured: the read keeps blocking until its timeout).
``socket.shutdown(SHUT_RDWR)`` wakes it in every one of those states. So each in-flight
request gets a handle that knows the socket it is blocked on, and ``cancel()`` shuts that
socket down, and only that one: a pooled connection serving another request is never hit.

* :mod:`._connect`: the one abortable ``connect`` both clients use (a plain blocking
  ``connect()`` cannot be aborted before the SYN is out; this one can, at any moment).
* :mod:`.httpx`: the httpx2 side (Anthropic), a network backend whose streams report each
  blocking call to the request's :class:`~.httpx.AbortSlot`.
* :mod:`.urllib3`: the urllib3 side (OpenAI through ``requests``, Bedrock through
  botocore), connection and pool mixins claimed by the request's
  :class:`~.urllib3.RequestAbort`; :mod:`.requests` mounts them on a ``requests.Session``.

Both sides also re-send, at once and without the agent's retry policy, a request whose
pooled keep-alive connection the server had closed (never after a response byte).

Nothing is imported here: importing one side does not load the other's client library.
"""
