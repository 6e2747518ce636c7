//! The multi-cluster test bed (real kube-apiservers on one machine) and the e2e tests.
