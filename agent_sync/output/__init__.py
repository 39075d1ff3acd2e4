"""Structured output: what ``output_type`` means on the wire, in the run and in a stream.

Inside: ``_spec`` (an output type as a JSON schema and a validator: :class:`OutputSpec`),
``_partial`` (a tolerant incremental JSON parser for streamed partial answers), ``_checks``
(the ``output_type=``/``output_retries=`` arguments). The loop's step is
``agent_sync.run._output``; each wire's mechanism ``agent_sync.models._output``. Users pass
``output_type=`` to ``Agent`` or a call and read ``result.output``; see ``docs/output.md``.
"""

from ._spec import OUTPUT_TOOL_NAME, OutputSpec, output_spec

__all__ = ["OUTPUT_TOOL_NAME", "OutputSpec", "output_spec"]
