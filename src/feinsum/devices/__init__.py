"""OpenCL devices: their identity and limits (:class:`~feinsum.devices.info.DeviceInfo`),
the default device, cached contexts (:mod:`.opencl`), and the probe that checks in a child
process what a device can build (:mod:`.probe`)."""
