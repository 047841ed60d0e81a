"""The test cluster's harness: start and stop it (`python -m tests.cluster.harness.cluster`),
reach its API (kube_api, cluster_access), install the chart, run the operator as a local
process, probe pods. The tests beside this folder use it; none of it is a test."""
