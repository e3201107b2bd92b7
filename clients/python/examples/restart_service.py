"""Gates a (fake) "restart service" tool behind Countersign.

    export COUNTERSIGN_ENDPOINT=http://127.0.0.1:50051
    export COUNTERSIGN_API_KEY=$(countersign admin key create --tenant default --role coordinator --name sre-bot)
    export COUNTERSIGN_PUBLIC_KEY=$(countersign admin signing-key show)
    python examples/restart_service.py node-01 nginx

The restart runs only when Countersign approves this exact restart and its
signed receipt checks out; otherwise the program says why and exits 3 (not
approved) or 4 (Countersign unreachable, or no decision in time).
"""

import argparse
import sys

import countersign

client = countersign.Client.from_env(gate_timeout=60)


@client.gate(
    action="host_restart_service",
    target=lambda host, service: host,
    blast_radius="single_device",
    reason=lambda host, service: f"{service} on {host} is unhealthy; restarting it",
    parameters=lambda host, service: {"service": service},
    rollback_plan=lambda host, service: f"systemctl start {service}",
)
def restart_service(host: str, service: str) -> str:
    approval = countersign.current_approval()
    assert approval is not None  # a gated function runs only under one
    # The real tool would run `systemctl restart` on the host here.
    print(f"restarting {service} on {host}: approved as {approval.proposal_id}, receipt valid until {approval.receipt.expires_at:%H:%M:%S}Z")
    return "restarted"


def main() -> int:
    parser = argparse.ArgumentParser(description="Restart a service, with Countersign's second signature.")
    parser.add_argument("host")
    parser.add_argument("service")
    args = parser.parse_args()
    try:
        print(restart_service(args.host, args.service))
    except countersign.Rejected as refused:
        print(f"not restarted: {refused.agent_message} (proposal {refused.proposal_id})", file=sys.stderr)
        if refused.reason:
            print(refused.reason, file=sys.stderr)
        return 3
    except countersign.Unavailable as unavailable:
        print(f"not restarted: no decision from Countersign: {unavailable}", file=sys.stderr)
        return 4
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
