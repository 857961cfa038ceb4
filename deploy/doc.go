// Package deploy holds Baton's deployment files (the Helm chart in
// helm/baton) and, in its tests, their verification: a module of its own so
// that Helm's and Kubernetes' libraries stay out of the main module.
//
//	make test-deploy    (cd deploy && go test ./...)
package deploy
