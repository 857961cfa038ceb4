package deploy

// cert-manager's CSI driver (csi.cert-manager.io) makes each pod's key and
// certificate in the pod from the volume's attributes, with no Secret. The
// attribute names are the driver's (github.com/cert-manager/csi-driver,
// pkg/apis/v1alpha1); it expands ${POD_NAME}, ${POD_NAMESPACE}, ${POD_UID}
// and ${SERVICE_ACCOUNT_NAME} in dns-names, uri-sans and common-name, and
// fails the mount on any other variable (pkg/requestgen).

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

const csiDriver = "csi.cert-manager.io"

// csiFiles are the files a cert-manager CSI volume holds: the driver's
// default names unless the attributes rename them.
func csiFiles(v corev1.Volume) []string {
	if v.CSI == nil || v.CSI.Driver != csiDriver {
		return nil
	}
	var out []string
	for attr, def := range map[string]string{"ca-file": "ca.crt", "certificate-file": "tls.crt", "privatekey-file": "tls.key"} {
		name := v.CSI.VolumeAttributes[csiDriver+"/"+attr]
		if name == "" {
			name = def
		}
		out = append(out, name)
	}
	return out
}

// csiExpand expands an attribute as the driver does for pod in the
// release's namespace; a variable the driver does not know is an error, as
// it fails the pod's mount.
func csiExpand(s, pod string) (string, error) {
	vars := map[string]string{"POD_NAME": pod, "POD_NAMESPACE": namespace, "POD_UID": "uid-of-" + pod, "SERVICE_ACCOUNT_NAME": "default"}
	var unknown []string
	out := os.Expand(s, func(v string) string {
		val, ok := vars[v]
		if !ok {
			unknown = append(unknown, v)
		}
		return val
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("variables %v are not the CSI driver's", unknown)
	}
	return out, nil
}

func csiList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// podTLSSecret matches the per-ordinal Secrets of either mode's naming
// (the chart's <sts>-<i>-tls).
var podTLSSecret = regexp.MustCompile(`-(master|rs)-[0-9]+-tls$`)

// checkCSIPods checks a role's CSI tls volume for each of its pods: the
// driver and Issuer, a certificate naming exactly baton://<role>/<pod>,
// DNS names holding the pod's own address, both usages, the TLS flags and
// BATON_TLS_* pointing into it, and no Secret of a pod's key mounted. It
// returns each pod's DNS names.
func checkCSIPods(t *testing.T, r rendered, role string, sts *appsv1.StatefulSet, vol corev1.Volume, issuers map[string]bool) [][]string {
	t.Helper()
	attr := func(k string) string { return vol.CSI.VolumeAttributes[csiDriver+"/"+k] }
	if vol.CSI.Driver != csiDriver {
		t.Errorf("%s: %s's tls volume uses driver %q, want %s", r.values, sts.Name, vol.CSI.Driver, csiDriver)
		return nil
	}
	if vol.CSI.ReadOnly == nil || !*vol.CSI.ReadOnly {
		t.Errorf("%s: %s's CSI tls volume is not readOnly (the driver refuses a writable one)", r.values, sts.Name)
	}
	if attr("issuer-name") == "" {
		t.Errorf("%s: %s's CSI volume names no issuer", r.values, sts.Name)
	}
	if attr("issuer-kind") == "Issuer" && !issuers[attr("issuer-name")] {
		t.Errorf("%s: %s's CSI volume names Issuer %q, which is not rendered", r.values, sts.Name, attr("issuer-name"))
	}
	if g := attr("issuer-group"); g != "cert-manager.io" {
		t.Errorf("%s: %s's CSI volume issuer-group %q, want cert-manager.io", r.values, sts.Name, g)
	}
	usages := csiList(attr("key-usages"))
	for _, u := range usages {
		if !contains(certUsages, u) {
			t.Errorf("%s: %s's CSI volume: usage %q is not cert-manager's", r.values, sts.Name, u)
		}
	}
	if !contains(usages, "server auth") || !contains(usages, "client auth") {
		t.Errorf("%s: %s's CSI volume key-usages %v, want server and client auth", r.values, sts.Name, usages)
	}
	c := sts.Spec.Template.Spec.Containers[0]
	if m, ok := mountFor(c, "/tls/x"); ok && m.Name == vol.Name && !m.ReadOnly {
		t.Errorf("%s: %s mounts its CSI tls volume writable", r.values, sts.Name)
	}
	var all [][]string
	for i := range int(*sts.Spec.Replicas) {
		pod := fmt.Sprintf("%s-%d", sts.Name, i)
		uris, err := csiExpand(attr("uri-sans"), pod)
		if err != nil {
			t.Errorf("%s: pod %s uri-sans: %v", r.values, pod, err)
		}
		want := fmt.Sprintf("baton://%s/%s", role, pod)
		if got := csiList(uris); len(got) != 1 || got[0] != want {
			t.Errorf("%s: pod %s's CSI certificate names %v, want [%s]", r.values, pod, got, want)
		}
		dns, err := csiExpand(attr("dns-names"), pod)
		if err != nil {
			t.Errorf("%s: pod %s dns-names: %v", r.values, pod, err)
		}
		names := csiList(dns)
		all = append(all, names)
		env := podEnv(c, pod)
		if addr, ok := argValue(c.Args, "grpc-addr"); ok {
			host, _, err := net.SplitHostPort(expand(addr, env))
			if err != nil || !contains(names, host) {
				t.Errorf("%s: pod %s's CSI certificate DNS names %v lack its own address %s", r.values, pod, names, host)
			}
		}
		// The TLS flags and the CLI's environment name this pod's own
		// files, in the CSI volume (TestVolumesWhereFlagsPoint checks the
		// file names).
		paths := map[string]string{}
		for _, f := range []string{"tls-ca", "tls-cert", "tls-key"} {
			if v, ok := argValue(c.Args, f); ok {
				paths["--"+f] = expand(v, env)
			} else {
				t.Errorf("%s: pod %s has no --%s", r.values, pod, f)
			}
		}
		for _, e := range []string{"BATON_TLS_CA", "BATON_TLS_CERT", "BATON_TLS_KEY"} {
			if v, ok := env[e]; ok {
				paths[e] = v
			}
		}
		for what, p := range paths {
			if m, ok := mountFor(c, p); !ok || m.Name != vol.Name {
				t.Errorf("%s: pod %s %s %s is not in its CSI tls volume", r.values, pod, what, p)
			}
		}
	}
	// No pod's key from a Secret: nothing of another pod's is mounted.
	for _, v := range sts.Spec.Template.Spec.Volumes {
		var secrets []string
		if v.Secret != nil {
			secrets = append(secrets, v.Secret.SecretName)
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.Secret != nil {
					secrets = append(secrets, src.Secret.Name)
				}
			}
		}
		for _, s := range secrets {
			if podTLSSecret.MatchString(s) {
				t.Errorf("%s: %s mounts Secret %s (volume %s), a pod's key, with the CSI driver on", r.values, sts.Name, s, v.Name)
			}
		}
	}
	return all
}

// cert-manager without a word on the mode gives each pod its own key
// through the CSI driver, from the chart's CA or the values' issuer, and
// makes no Certificate for a pod.
func TestCertManagerDefaultIsCSI(t *testing.T) {
	for _, tc := range []struct {
		name       string
		issuerRef  map[string]any
		wantIssuer [3]string
	}{
		{"chart's CA", nil, [3]string{releaseName + "-ca", "Issuer", "cert-manager.io"}},
		{"ClusterIssuer", map[string]any{"name": "corp-ca", "kind": "ClusterIssuer"}, [3]string{"corp-ca", "ClusterIssuer", "cert-manager.io"}},
	} {
		cm := map[string]any{"enabled": true}
		if tc.issuerRef != nil {
			cm["issuerRef"] = tc.issuerRef
		}
		objs, err := render(readValues(t, "", map[string]any{"tls": map[string]any{"certManager": cm}}))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		r := rendered{values: tc.name, objects: objs}
		for _, o := range r.ofKind("Certificate") {
			c := o.typed.(*Certificate)
			for _, u := range c.Spec.URIs {
				if strings.HasPrefix(u, "baton://master/") || strings.HasPrefix(u, "baton://regionserver/") {
					t.Errorf("%s: Certificate %s for a pod (%s) by default", tc.name, o.name, u)
				}
			}
			if !c.Spec.IsCA && c.Spec.IssuerRef.Name != tc.wantIssuer[0] {
				t.Errorf("%s: Certificate %s from %q, want %q", tc.name, o.name, c.Spec.IssuerRef.Name, tc.wantIssuer[0])
			}
		}
		for _, name := range []string{releaseName + "-master", releaseName + "-rs"} {
			sts, ok := r.statefulSets()[name]
			if !ok {
				t.Fatalf("%s: no StatefulSet %s", tc.name, name)
			}
			var vol *corev1.Volume
			for i, v := range sts.Spec.Template.Spec.Volumes {
				if v.Name == "tls" {
					vol = &sts.Spec.Template.Spec.Volumes[i]
				}
			}
			if vol == nil || vol.CSI == nil {
				t.Errorf("%s: %s's tls volume is not the CSI driver's by default", tc.name, name)
				continue
			}
			a := vol.CSI.VolumeAttributes
			got := [3]string{a[csiDriver+"/issuer-name"], a[csiDriver+"/issuer-kind"], a[csiDriver+"/issuer-group"]}
			if got != tc.wantIssuer {
				t.Errorf("%s: %s's CSI issuer %v, want %v", tc.name, name, got, tc.wantIssuer)
			}
		}
	}
}
