#!/usr/bin/env bash
# Cluster API provisioning on this machine: one 1+3 cluster, then 20 at once
# and a Gardener Shoot (docs/benchmarks.md "Cluster lifecycle"). Run from
# the checkout's root; F is the flotilla binary to use.
set -u
F=${F:-flotilla}
D=$(mktemp -d)
$F controlplane --data-dir $D/hub > $D/cp.log 2>&1 &
CP=$!
for i in $(seq 1 60); do [ -f $D/hub/kubeconfig ] && break; sleep 0.5; done
export KUBECONFIG=$D/hub/kubeconfig
avail() { kubectl get cl -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Available")].status}{"\n"}{end}' | grep -c True; }
t0=$(date +%s.%N)
$F cluster generate one --worker-machine-count 3 | kubectl apply -f - > /dev/null
until [ "$(avail)" = 1 ]; do sleep 0.05; done
t1=$(date +%s.%N)
echo "one 1+3 cluster: apply -> Available $(echo "$t1 - $t0" | bc) s"
until kubectl get clusters.cluster.karmada.io one >/dev/null 2>&1; do sleep 0.05; done
t1b=$(date +%s.%N)
echo "one 1+3 cluster: apply -> joined $(echo "$t1b - $t0" | bc) s"
kubectl delete cl one > /dev/null
# Three control plane machines: a member each on the cluster's etcd, behind
# its endpoint; then the lease holder killed.
t9=$(date +%s.%N)
$F cluster generate ha --control-plane-machine-count 3 --worker-machine-count 1 | kubectl apply -f - > /dev/null
until [ "$(kubectl get cl ha -o jsonpath='{.status.conditions[?(@.type=="Available")].status} {.status.controlPlane.availableReplicas}')" = "True 3" ]; do sleep 0.05; done
t10=$(date +%s.%N)
echo "one 3+1 cluster: apply -> Available with 3 control plane members $(echo "$t10 - $t9" | bc) s"
$F cluster kubeconfig ha > $D/ha.kubeconfig
lease() { KUBECONFIG=$D/ha.kubeconfig kubectl get lease -n kube-system kube-controller-manager -o jsonpath='{.spec.holderIdentity}' 2>/dev/null; }
until [ -n "$(lease)" ]; do sleep 0.05; done
holder=$(lease); machine=${holder%%_*}
pkill -9 -f "data-dir $D/hub/clusters/default/ha/machines/$machine( |$)"
t11=$(date +%s.%N)
KUBECONFIG=$D/ha.kubeconfig kubectl create deployment web --image=nginx --replicas=2 > /dev/null
until [ "$(KUBECONFIG=$D/ha.kubeconfig kubectl get deploy web -o jsonpath='{.status.readyReplicas}' 2>/dev/null)" = 2 ]; do sleep 0.05; done
t12=$(date +%s.%N)
echo "lease holder killed -> a Deployment created through the endpoint Ready: $(echo "$t12 - $t11" | bc) s (new holder $(lease))"
kubectl delete cl ha > /dev/null
# Gardener: provider-local's example Shoot (one worker), from the checkout.
G=crates/cli/tests/data/gardener
kubectl create namespace garden > /dev/null
for f in project cloudprofile seed secretbinding; do kubectl apply -f $G/$f.yaml > /dev/null; done
shoot_state() { kubectl get shoot local -n garden-local -o jsonpath='{.status.lastOperation.state}'; }
t6=$(date +%s.%N)
kubectl apply -f $G/shoot.yaml > /dev/null
until [ "$(shoot_state)" = Succeeded ]; do sleep 0.05; done
t7=$(date +%s.%N)
echo "provider-local's Shoot (1 worker): apply -> Create Succeeded $(echo "$t7 - $t6" | bc) s"
kubectl annotate shoot local -n garden-local confirmation.gardener.cloud/deletion=true > /dev/null
kubectl delete shoot local -n garden-local > /dev/null
t8=$(date +%s.%N)
echo "the Shoot deleted (waits for its finalizer): $(echo "$t8 - $t7" | bc) s"
t2=$(date +%s.%N)
for i in $(seq 1 20); do $F cluster generate c$i --worker-machine-count 3; echo ---; done > $D/twenty.yaml
kubectl apply -f $D/twenty.yaml > /dev/null
until [ "$(avail)" = 20 ]; do sleep 0.2; done
t3=$(date +%s.%N)
echo "20 clusters of 1+3 at once: apply -> all Available $(echo "$t3 - $t2" | bc) s"
echo "control plane RSS: $(grep VmRSS /proc/$CP/status)"
m=$(pgrep -f "member --name c1 " | head -1); echo "one cluster's member RSS: $(grep VmRSS /proc/$m/status)"
t4=$(date +%s.%N)
kubectl delete cl --all > /dev/null
t5=$(date +%s.%N)
echo "20 clusters deleted: $(echo "$t5 - $t4" | bc) s; members left: $(pgrep -fc "flotilla member --name c")"
kill $CP; sleep 1; rm -rf $D
