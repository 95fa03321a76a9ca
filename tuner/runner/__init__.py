"""The vLLM process in one package: starting and stopping a server (``server``, its process group
``procgroup``, the ``watchdog`` that outlives tuner, ``leases`` of the GPUs, ``ports``, deferred
``interrupts``), asking an interpreter which vLLM it has (``interpreter``), the trial runner seam
(one measured server launch per call, ``vllm``) and the check of the requested GPU against this
machine (``hardware``, ``placement``)."""
