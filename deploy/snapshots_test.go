package deploy

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// permissionRank orders the ACL's permissions as security.Permission does
// (proto/optionspb: READ 2 < OPERATE 3 < ADMIN 4).
var permissionRank = map[string]int{"read": 2, "operate": 3, "admin": 4}

// snapshotSavePermission is the permission admin.proto's rule gives
// SnapshotSave: what the CronJob's client must be granted.
func snapshotSavePermission(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "proto", "adminpb", "admin.proto"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)rpc SnapshotSave\(.*?permission: PERMISSION_([A-Z]+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("admin.proto: no permission rule for SnapshotSave")
	}
	return strings.ToLower(string(m[1]))
}

// The snapshots CronJob: rendered only when enabled; saves through the
// client Service's gRPC port into its own claim, mounted where --dir
// points; one run at a time; the masters' security contexts; with TLS a
// baton://client/backup certificate mounted where its flags point and a
// grant that SnapshotSave admits.
func TestSnapshotCronJob(t *testing.T) {
	need := snapshotSavePermission(t)
	enabledSomewhere := false
	for _, r := range renderAll(t) {
		cjs := r.cronJobs()
		full := releaseName
		if !value(t, r, "snapshots.enabled").(bool) {
			if len(cjs) != 0 || len(r.ofKind("PersistentVolumeClaim")) != 0 {
				t.Errorf("%s: snapshots off, yet %d CronJobs and %d claims", r.values, len(cjs), len(r.ofKind("PersistentVolumeClaim")))
			}
			continue
		}
		enabledSomewhere = true
		cj, ok := cjs[full+"-snapshots"]
		if !ok || len(cjs) != 1 {
			t.Errorf("%s: CronJobs %v, want %s-snapshots", r.values, cjs, full)
			continue
		}
		if cj.Spec.ConcurrencyPolicy != "Forbid" {
			t.Errorf("%s: concurrencyPolicy %q, want Forbid", r.values, cj.Spec.ConcurrencyPolicy)
		}
		if cj.Spec.Schedule != value(t, r, "snapshots.schedule").(string) {
			t.Errorf("%s: schedule %q", r.values, cj.Spec.Schedule)
		}
		job := cj.Spec.JobTemplate.Spec
		// A save stuck on a stream that never ends (the transfer has no
		// timeout of its own) would hold the Forbid slot and skip every
		// later run: the Job has a deadline.
		if d := job.ActiveDeadlineSeconds; d == nil || int(*d) != intValue(t, r, "snapshots.activeDeadlineSeconds") || *d <= 0 {
			t.Errorf("%s: activeDeadlineSeconds %v, want snapshots.activeDeadlineSeconds (> 0)", r.values, d)
		}
		if job.BackoffLimit == nil || int(*job.BackoffLimit) != intValue(t, r, "snapshots.backoffLimit") {
			t.Errorf("%s: backoffLimit %v", r.values, job.BackoffLimit)
		}
		pod := job.Template.Spec
		if pod.RestartPolicy != corev1.RestartPolicyNever && pod.RestartPolicy != corev1.RestartPolicyOnFailure {
			t.Errorf("%s: restartPolicy %q: a Job's must be Never or OnFailure", r.values, pod.RestartPolicy)
		}
		masters := r.statefulSets()[full+"-master"]
		if !reflect.DeepEqual(pod.SecurityContext, masters.Spec.Template.Spec.SecurityContext) || pod.SecurityContext == nil || pod.SecurityContext.FSGroup == nil {
			t.Errorf("%s: pod securityContext %+v, want the masters' (with the fsGroup that makes the volume writable)", r.values, pod.SecurityContext)
		}
		if len(pod.Containers) != 1 {
			t.Fatalf("%s: %d containers", r.values, len(pod.Containers))
		}
		c := pod.Containers[0]
		if !reflect.DeepEqual(c.SecurityContext, masters.Spec.Template.Spec.Containers[0].SecurityContext) {
			t.Errorf("%s: container securityContext %+v, want the masters'", r.values, c.SecurityContext)
		}
		volumes := map[string]corev1.Volume{}
		for _, v := range pod.Volumes {
			volumes[v.Name] = v
		}

		// --dir is the mount point of the chart's own claim.
		dir, ok := argValue(c.Args, "dir")
		if !ok {
			t.Errorf("%s: no --dir in %q", r.values, c.Args)
		} else if m, ok := mountFor(c, dir); !ok || m.MountPath != dir || m.ReadOnly {
			t.Errorf("%s: --dir %s is not a writable mount point (%+v)", r.values, dir, m)
		} else if v := volumes[m.Name]; v.PersistentVolumeClaim == nil {
			t.Errorf("%s: --dir %s is volume %q, not a claim", r.values, dir, m.Name)
		} else if o, ok := r.get("PersistentVolumeClaim", v.PersistentVolumeClaim.ClaimName); !ok || o.name != full+"-snapshots" {
			t.Errorf("%s: --dir %s is claim %q, which the chart does not render as %s-snapshots", r.values, dir, v.PersistentVolumeClaim.ClaimName, full)
		} else {
			pvc := o.typed.(*corev1.PersistentVolumeClaim)
			if got := pvc.Spec.Resources.Requests.Storage().String(); got != value(t, r, "snapshots.persistence.size").(string) {
				t.Errorf("%s: claim size %s", r.values, got)
			}
			if sc := value(t, r, "snapshots.persistence.storageClass").(string); sc != "" && (pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != sc) {
				t.Errorf("%s: claim class %v, want %s", r.values, pvc.Spec.StorageClassName, sc)
			}
		}
		if v, _ := argValue(c.Args, "retain"); v != strconv.Itoa(intValue(t, r, "snapshots.retain")) {
			t.Errorf("%s: --retain %q, want snapshots.retain", r.values, v)
		}

		// --addr is the client Service's port that reaches the masters'
		// gRPC container port.
		addr, ok := argValue(c.Args, "addr")
		if !ok {
			t.Fatalf("%s: no --addr", r.values)
		}
		host, port := addr[:strings.LastIndexByte(addr, ':')], addrPort(t, addr)
		svcName := strings.TrimSuffix(host, "."+namespace+".svc.cluster.local")
		o, ok := r.get("Service", svcName)
		if !ok {
			t.Errorf("%s: --addr %s names no rendered Service", r.values, addr)
			continue
		}
		svc := o.typed.(*corev1.Service)
		if svc.Spec.ClusterIP == "None" {
			t.Errorf("%s: --addr %s is the headless Service: a not-ready master may answer", r.values, addr)
		}
		var target *intstr.IntOrString
		for _, p := range svc.Spec.Ports {
			if p.Port == port {
				target = &p.TargetPort
			}
		}
		mc := masters.Spec.Template.Spec.Containers[0]
		if target == nil {
			t.Errorf("%s: Service %s has no port %d", r.values, svcName, port)
		} else if cp, ok := containerPort(mc, *target); !ok || cp != 7070 {
			t.Errorf("%s: Service %s port %d reaches container port %v, not the masters' gRPC", r.values, svcName, port, target)
		} else if ga, ok := argValue(mc.Args, "grpc-addr"); ok && addrPort(t, ga) != cp {
			t.Errorf("%s: the masters listen on %s, the Service targets %d", r.values, ga, cp)
		}

		// TLS: the client's files are mounted where its flags point, from
		// a certificate naming baton://client/backup, which the masters
		// grant SnapshotSave's permission.
		tlsOn := value(t, r, "tls.certManager.enabled").(bool) || len(value(t, r, "tls.existingSecrets.masters").([]any)) > 0
		_, hasCert := argValue(c.Args, "tls-cert")
		if tlsOn != hasCert {
			t.Errorf("%s: TLS %v, client certificate flags %v", r.values, tlsOn, hasCert)
		}
		if !tlsOn {
			continue
		}
		var secret string
		for _, flag := range []string{"tls-ca", "tls-cert", "tls-key"} {
			p, ok := argValue(c.Args, flag)
			if !ok {
				t.Errorf("%s: no --%s", r.values, flag)
				continue
			}
			m, ok := mountFor(c, p)
			if !ok || !volumeHolds(volumes[m.Name], strings.TrimPrefix(p, m.MountPath+"/")) {
				t.Errorf("%s: --%s %s names no mounted file", r.values, flag, p)
				continue
			}
			secret = volumes[m.Name].Secret.SecretName
		}
		if value(t, r, "tls.certManager.enabled").(bool) {
			var makers []string
			for _, co := range r.ofKind("Certificate") {
				cert := co.typed.(*Certificate)
				if cert.Spec.SecretName == secret {
					makers = append(makers, co.name)
					if len(cert.Spec.URIs) != 1 || cert.Spec.URIs[0] != "baton://client/backup" || !contains(cert.Spec.Usages, "client auth") {
						t.Errorf("%s: Certificate %s names %v (%v), want baton://client/backup for client auth", r.values, co.name, cert.Spec.URIs, cert.Spec.Usages)
					}
				}
			}
			if len(makers) != 1 {
				t.Errorf("%s: Secret %s made by Certificates %v, want one", r.values, secret, makers)
			}
		}
		grants, _ := argValue(mc.Args, "acl-initial-grants")
		got := ""
		for _, g := range strings.Split(grants, ",") {
			if k, v, _ := strings.Cut(g, "="); k == "backup" {
				got = v
			}
		}
		if permissionRank[got] < permissionRank[need] {
			t.Errorf("%s: the masters grant backup %q (--acl-initial-grants=%s); SnapshotSave needs %s", r.values, got, grants, need)
		}
	}
	if !enabledSomewhere {
		t.Error("no ci values file enables snapshots")
	}
}

// What the snapshot values refuse, and a backup client listed among the
// cert-manager clients gets one Certificate, not two.
func TestSnapshotValues(t *testing.T) {
	on := map[string]any{"enabled": true}
	if _, err := render(readValues(t, "", map[string]any{"snapshots": map[string]any{"enabled": true, "retain": 0}})); err == nil || !strings.Contains(err.Error(), "snapshots.retain 0") {
		t.Errorf("retain 0 rendered (err %v)", err)
	}
	secrets := map[string]any{"masters": []any{"m0", "m1", "m2"}, "regionServers": []any{"r0", "r1", "r2"}}
	if _, err := render(readValues(t, "", map[string]any{"snapshots": on, "tls": map[string]any{"existingSecrets": secrets}})); err == nil || !strings.Contains(err.Error(), "snapshots.existingSecret") {
		t.Errorf("TLS from Secrets without snapshots.existingSecret rendered (err %v)", err)
	}
	objs, err := render(readValues(t, "", map[string]any{"snapshots": on, "tls": map[string]any{"certManager": map[string]any{"enabled": true, "clients": []any{"operator", "backup"}}}}))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range objs {
		if o.kind == "Certificate" && o.name == releaseName+"-client-backup" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d Certificates %s-client-backup with backup among the clients, want 1", n, releaseName)
	}
}
