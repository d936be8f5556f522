"""Drop-in array contexts whose programs feinsum transforms (arraycontext + pytato):
:class:`FeinsumPytatoPyOpenCLArrayContext` (lazy) and :class:`FeinsumPyOpenCLArrayContext`
(eager). See the compiler writer's guide, "Array contexts"."""

from feinsum.hook.contexts import FeinsumPyOpenCLArrayContext, FeinsumPytatoPyOpenCLArrayContext

__all__ = ["FeinsumPyOpenCLArrayContext", "FeinsumPytatoPyOpenCLArrayContext"]
