"""The pre-job gate around a job's start and end: checks on the node, a drain on a failure.

job_gate   a node's suite before or after a job, and its guarded drain: what `node prolog`,
           `node epilog` and the Kubernetes gate all do                         (I/O)
webhook    the Kubernetes pre-job gate: GPU pods get an init container that asks the gate
           before they start; a mutating admission webhook that adds it        (pure)
node_health  a node healthy or not, and why, for in-job restart frameworks      (pure)
server     the gate's HTTP(S) endpoint: the webhook (POST /mutate), the init
           containers' asks (POST /prejob/NODE), GET /nodes/NAME/health         (I/O)
"""
