#!/usr/bin/env python3
"""Local Kubernetes control plane for ctxfit (real etcd/apiserver/controller-manager/scheduler, kwok nodes).

  hack/cluster.py up     [--dir DIR] [--no-default-nodes] [--lws]   start; prints `export KUBECONFIG=...`
                                                          (--lws: also the LeaderWorkerSet controller)
  hack/cluster.py down   [--dir DIR]                        stop exactly the started processes, remove data
  hack/cluster.py status [--dir DIR]                        up/down, kubeconfig, pids and ports

DIR defaults to ~/.cache/ctxfit/cluster/default. Binaries come from hack/k8s-bins.sh (built once, cached)
or $CTXFIT_K8S_BIN_DIR. See hack/README.md for the simulated-engine labels and annotations.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ctxfit_cluster as cc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["up", "down", "status"])
    ap.add_argument(
        "--dir", default=str(cc.DEFAULT_WORK_DIR), help="work dir (state, kubeconfig, data, logs)"
    )
    ap.add_argument("--no-default-nodes", action="store_true", help="start without the default GPU node pool")
    ap.add_argument("--lws", action="store_true", help="also run the LeaderWorkerSet controller (hack/addons_lws.py)")
    args = ap.parse_args(argv)

    cluster = cc.Cluster(args.dir)
    if args.command == "up":
        if cluster.is_up():
            print(f"# already up in {cluster.work_dir}")
            print(f"export KUBECONFIG={cluster.kubeconfig}")
            return 0
        secs = cluster.start(nodes=[] if args.no_default_nodes else None)
        if args.lws:
            from addons_lws import start_lws

            start_lws(cluster)
        print(f"export KUBECONFIG={cluster.kubeconfig}")
        print(
            f"# started in {secs:.1f} s (logs: {cluster.logs_dir}; "
            f"stop: hack/cluster.py down --dir {cluster.work_dir})"
        )
        return 0
    if args.command == "down":
        if not cluster.state:
            print(f"# nothing recorded in {cluster.work_dir}")
            return 0
        pids = cluster.pids
        cluster.stop()
        print(f"# stopped {' '.join(f'{k}={v}' for k, v in pids.items())}; data removed")
        return 0
    # status
    if cluster.is_up():
        print(f"up: {cluster.server}")
        print(f"export KUBECONFIG={cluster.kubeconfig}")
        print(f"pids: {cluster.pids}")
        print(f"ports: {cluster.ports}")
        return 0
    alive = cluster.running_components()
    print("down" + (f" (but still running: {alive}; run `down`)" if alive else ""))
    return 1


if __name__ == "__main__":
    sys.exit(main())
