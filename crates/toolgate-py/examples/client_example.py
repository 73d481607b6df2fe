"""toolgate.Client against a running gateway: `toolgate serve` (its bundled config)
decides for every process that asks it.

Run: toolgate serve & python examples/client_example.py
"""

import os

from toolgate import AdmissionRejected, Client

with Client(os.environ.get("TOOLGATE_URL", "http://127.0.0.1:8787"), token=os.environ.get("TOOLGATE_TOKEN")) as gate:
    for customer in range(3):  # lookup_customer allows 2 per second
        try:
            with gate.admit("lookup_customer") as lease:  # completed on exit: outcome + latency
                print(f"lookup {customer}: admitted (waited {lease.waited:.1f}s)")
        except AdmissionRejected as e:
            print(f"lookup {customer}: {e.reason} by {e.quota}, retry in {e.retry_after:.1f}s")

    with gate.reserve({"get_payment_status": 1, "search_documents": 2}) as plan:  # all or nothing
        print("reserved:", ", ".join(lease.tool for lease in plan.leases))
        plan.leases[0].complete()  # the others are given back when the block ends

    lease = gate.admit("search_documents", tokens=1200)  # a token budget: estimate now...
    lease.complete("success", tokens=950)  # ...reconcile with the actual count
    state = {t["tool"]: t["in_flight"] for t in gate.tools()}
    print("in flight:", state)
