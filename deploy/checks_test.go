package deploy

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ---- the baton binary's flags ----

var (
	batonOnce sync.Once
	batonPath string
	batonErr  error
)

// baton builds the main module's binary once (the repository root is this
// module's parent).
func baton(t *testing.T) string {
	t.Helper()
	batonOnce.Do(func() {
		dir, err := os.MkdirTemp("", "baton-deploy-test")
		if err != nil {
			batonErr = err
			return
		}
		batonPath = filepath.Join(dir, "baton")
		cmd := exec.Command("go", "build", "-o", batonPath, "./cmd/node")
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			batonErr = fmt.Errorf("go build ./cmd/node: %w\n%s", err, out)
		}
	})
	if batonErr != nil {
		t.Fatal(batonErr)
	}
	return batonPath
}

var flagLine = regexp.MustCompile(`(?m)^\s+-{1,2}([a-z0-9][a-z0-9-]*)\b`)

var helpCache = map[string]map[string]bool{}

// helpFlags are the flags `baton <args> -h` lists; a command that lists
// none (one that does not exist yet) is an error, reported once.
func helpFlags(t *testing.T, args ...string) map[string]bool {
	t.Helper()
	key := strings.Join(args, " ")
	if f, ok := helpCache[key]; ok {
		return f
	}
	cmd := exec.Command(baton(t), append(args, "-h")...)
	out, _ := cmd.CombinedOutput() // -h exits 0 or 2 by command; the listing is what counts
	flags := map[string]bool{}
	for _, m := range flagLine.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if len(flags) == 0 {
		t.Errorf("baton %s -h listed no flags:\n%s", key, out)
	}
	helpCache[key] = flags
	return flags
}

// argFlags are the flag names in a command line (--name, --name=value,
// -name), in order.
func argFlags(args []string) []string {
	var out []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name := strings.TrimLeft(a, "-")
		if i := strings.IndexByte(name, '='); i >= 0 {
			name = name[:i]
		}
		out = append(out, name)
	}
	return out
}

// argValue is flag name's value in args (--name=value or --name value).
func argValue(args []string, name string) (string, bool) {
	for i, a := range args {
		for _, p := range []string{"--" + name, "-" + name} {
			if a == p && i+1 < len(args) {
				return args[i+1], true
			}
			if strings.HasPrefix(a, p+"=") {
				return strings.TrimPrefix(a, p+"="), true
			}
		}
	}
	return "", false
}

// expand replaces $(VAR) as the kubelet does in a container's args and
// env values (not in exec hooks: see TestPreStop).
func expand(s string, env map[string]string) string {
	return regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// podEnv is the environment the kubelet gives ordinal's pod: the downward
// API's pod name and the literal values, expanded in order.
func podEnv(c corev1.Container, pod string) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = pod
		case e.ValueFrom == nil:
			env[e.Name] = expand(e.Value, env)
		}
	}
	return env
}

// Every flag the chart passes exists in the binary's help. The flags of
// issue 32's contract (--initial-cluster-size, --listen-host,
// cluster transfer-leadership) come with the agent's side of it.
func TestChartFlagsExist(t *testing.T) {
	commands := map[string]map[string]bool{
		"agent":        helpFlags(t, "agent"),
		"regionserver": helpFlags(t, "regionserver"),
	}
	snapshotSave := helpFlags(t, "snapshot", "save")
	for _, r := range renderAll(t) {
		for _, cj := range r.cronJobs() {
			for _, c := range cj.Spec.JobTemplate.Spec.Template.Spec.Containers {
				if len(c.Args) < 2 || c.Args[0] != "snapshot" || c.Args[1] != "save" {
					t.Errorf("%s: CronJob %s/%s runs baton %q, not snapshot save", r.values, cj.Name, c.Name, c.Args)
					continue
				}
				for _, f := range argFlags(c.Args[2:]) {
					if !snapshotSave[f] {
						t.Errorf("%s: CronJob %s/%s: --%s is not in `baton snapshot save -h`", r.values, cj.Name, c.Name, f)
					}
				}
			}
		}
		for name, sts := range r.statefulSets() {
			for _, c := range sts.Spec.Template.Spec.Containers {
				if len(c.Args) == 0 {
					t.Errorf("%s: %s/%s has no args", r.values, name, c.Name)
					continue
				}
				known, ok := commands[c.Args[0]]
				if !ok {
					t.Errorf("%s: %s/%s runs baton %q, not agent or regionserver", r.values, name, c.Name, c.Args[0])
					continue
				}
				for _, f := range argFlags(c.Args[1:]) {
					if !known[f] {
						t.Errorf("%s: %s/%s: --%s is not in `baton %s -h`", r.values, name, c.Name, f, c.Args[0])
					}
				}
				if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Exec != nil {
					cmd := c.Lifecycle.PreStop.Exec.Command
					if len(cmd) < 3 || cmd[0] != "/baton" {
						t.Errorf("%s: %s/%s preStop %q: want /baton cluster ...", r.values, name, c.Name, cmd)
						continue
					}
					for _, a := range cmd {
						// Kubernetes expands $(VAR) in args and env, not in
						// an exec hook: the CLI would get the text itself.
						if strings.Contains(a, "$(") {
							t.Errorf("%s: %s/%s preStop argument %q: an exec hook's arguments are not expanded (take it from the environment)", r.values, name, c.Name, a)
						}
					}
					if !slices.Contains(argFlags(cmd[3:]), "from") && !envFromPodName(c.Env, "BATON_ID") {
						t.Errorf("%s: %s/%s preStop names no member: no --from and no BATON_ID from metadata.name", r.values, name, c.Name)
					}
					sub := helpFlags(t, cmd[1], cmd[2])
					if len(sub) == 0 {
						continue
					}
					for _, f := range argFlags(cmd[3:]) {
						if !sub[f] {
							t.Errorf("%s: %s/%s preStop: --%s is not in `baton %s %s -h`", r.values, name, c.Name, f, cmd[1], cmd[2])
						}
					}
				}
			}
		}
	}
}

// ---- ports ----

func containerPort(c corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

func addrPort(t *testing.T, addr string) int32 {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return int32(n)
}

// Probes, Services and ServiceMonitors name ports the containers have, and
// the containers listen where their flags say.
func TestPortsMatch(t *testing.T) {
	for _, r := range renderAll(t) {
		stss := r.statefulSets()
		for name, sts := range stss {
			c := sts.Spec.Template.Spec.Containers[0]
			probes := map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe}
			if c.Args[0] == "agent" {
				probes["startup"] = c.StartupProbe
			}
			for what, p := range probes {
				if p == nil {
					t.Errorf("%s: %s has no %s probe", r.values, name, what)
					continue
				}
				var port intstr.IntOrString
				switch {
				case p.HTTPGet != nil:
					port = p.HTTPGet.Port
					httpAddr, _ := argValue(c.Args, "http-addr")
					if n, ok := containerPort(c, port); !ok || httpAddr == "" || n != addrPort(t, httpAddr) {
						t.Errorf("%s: %s %s probe on %s (container port %d) but --http-addr %q", r.values, name, what, port.String(), n, httpAddr)
					}
				case p.TCPSocket != nil:
					port = p.TCPSocket.Port
				default:
					t.Errorf("%s: %s %s probe is neither httpGet nor tcpSocket", r.values, name, what)
					continue
				}
				if _, ok := containerPort(c, port); !ok {
					t.Errorf("%s: %s %s probe port %s is not a container port", r.values, name, what, port.String())
				}
			}
			for _, flag := range []string{"grpc-addr", "raft-addr", "http-addr"} {
				if v, ok := argValue(c.Args, flag); ok {
					if _, ok := containerPort(c, intstr.FromInt32(addrPort(t, v))); !ok {
						t.Errorf("%s: %s --%s %s: no container port %d", r.values, name, flag, v, addrPort(t, v))
					}
				}
			}
			if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.Args[0] == "agent" {
				if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/livez" {
					t.Errorf("%s: %s probes: readiness %s, liveness %v; want /readyz and /livez", r.values, name, c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet)
				}
				_, tls := argValue(c.Args, "tls-cert")
				want := corev1.URISchemeHTTP
				if tls {
					want = corev1.URISchemeHTTPS
				}
				if c.ReadinessProbe.HTTPGet.Scheme != want || c.LivenessProbe.HTTPGet.Scheme != want {
					t.Errorf("%s: %s probes' scheme %s/%s, want %s (TLS %v)", r.values, name, c.ReadinessProbe.HTTPGet.Scheme, c.LivenessProbe.HTTPGet.Scheme, want, tls)
				}
				// A master loading a large state serves HTTP only once it
				// has: liveness must not count until /livez first answers,
				// and the budget for that is long (10 minutes by default).
				if sp := c.StartupProbe; sp != nil {
					if sp.HTTPGet == nil || sp.HTTPGet.Path != "/livez" || sp.HTTPGet.Scheme != want || sp.HTTPGet.Port != c.LivenessProbe.HTTPGet.Port {
						t.Errorf("%s: %s startup probe %v, want liveness's /livez (%s, port %s)", r.values, name, sp.HTTPGet, want, c.LivenessProbe.HTTPGet.Port.String())
					}
					if budget := sp.PeriodSeconds * sp.FailureThreshold; budget < 600 {
						t.Errorf("%s: %s startup probe allows %ds (period %d x %d), want at least 600", r.values, name, budget, sp.PeriodSeconds, sp.FailureThreshold)
					}
				}
			}
		}
		services := map[string]*corev1.Service{}
		for _, o := range r.ofKind("Service") {
			svc := o.typed.(*corev1.Service)
			services[o.name] = svc
			var pods []*appsv1.StatefulSet
			for _, sts := range stss {
				if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(sts.Spec.Template.Labels)) {
					pods = append(pods, sts)
				}
			}
			if len(pods) != 1 {
				t.Errorf("%s: Service %s selects the pods of %d StatefulSets, want 1", r.values, o.name, len(pods))
				continue
			}
			c := pods[0].Spec.Template.Spec.Containers[0]
			for _, sp := range svc.Spec.Ports {
				n, ok := containerPort(c, sp.TargetPort)
				if !ok {
					t.Errorf("%s: Service %s port %s targets %s, not a port of %s", r.values, o.name, sp.Name, sp.TargetPort.String(), pods[0].Name)
				} else if n != sp.Port {
					t.Errorf("%s: Service %s port %s is %d but reaches container port %d: the DNS addresses use the container's", r.values, o.name, sp.Name, sp.Port, n)
				}
			}
		}
		for _, o := range r.ofKind("ServiceMonitor") {
			sm := o.raw
			var obj struct {
				Spec struct {
					Selector  struct{ MatchLabels map[string]string } `json:"selector"`
					Endpoints []struct {
						Port   string `json:"port"`
						Scheme string `json:"scheme"`
					} `json:"endpoints"`
				} `json:"spec"`
			}
			mustJSON(t, sm, &obj)
			matched := 0
			for _, svc := range services {
				if !labels.SelectorFromSet(obj.Spec.Selector.MatchLabels).Matches(labels.Set(svc.Labels)) {
					continue
				}
				matched++
				for _, ep := range obj.Spec.Endpoints {
					found := false
					for _, sp := range svc.Spec.Ports {
						found = found || sp.Name == ep.Port
					}
					if !found {
						t.Errorf("%s: ServiceMonitor %s scrapes port %q, which Service %s lacks", r.values, o.name, ep.Port, svc.Name)
					}
				}
			}
			if matched != 1 {
				t.Errorf("%s: ServiceMonitor %s selects %d Services, want 1 (two over the same pods scrape each twice)", r.values, o.name, matched)
			}
		}
	}
}

// ---- quorum ----

// The masters' disruption budget never lets a drain take a quorum, and
// still lets a drain proceed one master at a time from 3 masters up.
func TestPDBKeepsQuorum(t *testing.T) {
	check := func(r rendered) {
		n := intValue(t, r, "masters.replicas")
		o, ok := r.get("PodDisruptionBudget", releaseName+"-master")
		if !ok {
			t.Errorf("%s: no PodDisruptionBudget for the masters", r.values)
			return
		}
		pdb := o.typed.(*policyv1.PodDisruptionBudget)
		// A master that is not ready (stuck, crash-looping) already counts
		// as unavailable: evicting it costs nothing, and IfHealthyBudget
		// would let it block a drain for good.
		for _, po := range r.ofKind("PodDisruptionBudget") {
			p := po.typed.(*policyv1.PodDisruptionBudget)
			if p.Spec.UnhealthyPodEvictionPolicy == nil || *p.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
				t.Errorf("%s: PDB %s unhealthyPodEvictionPolicy %v, want AlwaysAllow", r.values, po.name, p.Spec.UnhealthyPodEvictionPolicy)
			}
		}
		if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MinAvailable != nil {
			t.Errorf("%s: the masters' PDB should set maxUnavailable only", r.values)
			return
		}
		mu, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MaxUnavailable, n, false)
		if err != nil {
			t.Fatal(err)
		}
		quorum := n/2 + 1
		if n-mu < quorum {
			t.Errorf("%s: %d masters, maxUnavailable %d leaves %d < quorum %d", r.values, n, mu, n-mu, quorum)
		}
		if n >= 3 && mu < 1 {
			t.Errorf("%s: %d masters, maxUnavailable %d blocks every drain", r.values, n, mu)
		}
		sts := r.statefulSets()[releaseName+"-master"]
		sel, _ := metaSelector(pdb.Spec.Selector)
		if !sel.Matches(labels.Set(sts.Spec.Template.Labels)) {
			t.Errorf("%s: the masters' PDB does not select the master pods", r.values)
		}
		for name, other := range r.statefulSets() {
			if name != sts.Name && sel.Matches(labels.Set(other.Spec.Template.Labels)) {
				t.Errorf("%s: the masters' PDB also selects %s's pods", r.values, name)
			}
		}
	}
	for _, r := range renderAll(t) {
		check(r)
	}
	// Consul's formula, for every odd size the chart accepts.
	for n, want := range map[int]int{1: 0, 3: 1, 5: 1, 7: 2, 9: 3} {
		vals := readValues(t, "", map[string]any{"masters": map[string]any{"replicas": n, "initialClusterSize": min(n, 3)}})
		objs, err := render(vals)
		if err != nil {
			t.Fatalf("%d masters: %v", n, err)
		}
		r := rendered{values: fmt.Sprintf("%d masters", n), vals: vals, objects: objs}
		check(r)
		o, _ := r.get("PodDisruptionBudget", releaseName+"-master")
		if got := o.typed.(*policyv1.PodDisruptionBudget).Spec.MaxUnavailable.IntValue(); got != want {
			t.Errorf("%d masters: maxUnavailable %d, want %d", n, got, want)
		}
	}
	// An override that would break quorum is refused.
	_, err := render(readValues(t, "", map[string]any{"masters": map[string]any{"replicas": 5, "podDisruptionBudget": map[string]any{"maxUnavailable": 3}}}))
	if err == nil || !strings.Contains(err.Error(), "quorum") {
		t.Errorf("maxUnavailable 3 of 5 rendered (err %v), want a refusal naming the quorum", err)
	}
}

// An even master count fails to render, saying why.
func TestEvenMastersRefused(t *testing.T) {
	for _, n := range []int{2, 4, 6} {
		_, err := render(readValues(t, "", map[string]any{"masters": map[string]any{"replicas": n}}))
		if err == nil {
			t.Errorf("%d masters rendered", n)
			continue
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("masters.replicas must be odd (1, 3, 5, 7): %d masters", n)) {
			t.Errorf("%d masters: %v; want the odd-only message", n, err)
		}
	}
}

// ---- peers from DNS ----

// derivePeers replicates the agent's derivation (issue 32's contract):
// --id NAME-ORDINAL, the raft host's first label is the id, and member i of
// N is the raft host with its first label replaced by NAME-i.
func derivePeers(id, raftAddr string, n int) ([]string, error) {
	cut := strings.LastIndexByte(id, '-')
	if cut <= 0 {
		return nil, fmt.Errorf("id %q has no -ORDINAL", id)
	}
	if _, err := strconv.Atoi(id[cut+1:]); err != nil {
		return nil, fmt.Errorf("id %q: ordinal: %w", id, err)
	}
	host, port, err := net.SplitHostPort(raftAddr)
	if err != nil {
		return nil, err
	}
	first, rest, ok := strings.Cut(host, ".")
	if !ok || first != id {
		return nil, fmt.Errorf("raft host %q's first label is not the id %q", host, id)
	}
	var out []string
	for i := range n {
		out = append(out, net.JoinHostPort(fmt.Sprintf("%s-%d.%s", id[:cut], i, rest), port))
	}
	return out, nil
}

// Each master pod's derived peers are the StatefulSet's own pods, named
// through its headless Service in the release's namespace; region servers
// reach the same names.
func TestPeersFromDNS(t *testing.T) {
	for _, r := range renderAll(t) {
		sts := r.statefulSets()[releaseName+"-master"]
		n := int(*sts.Spec.Replicas)
		domain := value(t, r, "clusterDomain").(string)
		svcObj, ok := r.get("Service", sts.Spec.ServiceName)
		if !ok {
			t.Errorf("%s: the masters' serviceName %q is not a rendered Service", r.values, sts.Spec.ServiceName)
			continue
		}
		svc := svcObj.typed.(*corev1.Service)
		if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
			t.Errorf("%s: Service %s: clusterIP %q, publishNotReadyAddresses %v; want a headless Service publishing not-ready pods", r.values, svc.Name, svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses)
		}
		if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
			t.Errorf("%s: podManagementPolicy %q, want Parallel", r.values, sts.Spec.PodManagementPolicy)
		}
		if sts.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
			t.Errorf("%s: updateStrategy %q, want RollingUpdate", r.values, sts.Spec.UpdateStrategy.Type)
		}
		pods := map[string]bool{}
		for i := range n {
			pods[fmt.Sprintf("%s-%d", sts.Name, i)] = true
		}
		c := sts.Spec.Template.Spec.Containers[0]
		size, _ := argValue(c.Args, "initial-cluster-size")
		if want := intValue(t, r, "masters.initialClusterSize"); size != strconv.Itoa(want) {
			t.Errorf("%s: --initial-cluster-size %q, want masters.initialClusterSize %d", r.values, size, want)
		}
		for pod := range pods {
			env := podEnv(c, pod)
			args := make([]string, len(c.Args))
			for i, a := range c.Args {
				args[i] = expand(a, env)
			}
			id, _ := argValue(args, "id")
			raft, _ := argValue(args, "raft-addr")
			grpc, _ := argValue(args, "grpc-addr")
			if id != pod {
				t.Errorf("%s: pod %s runs with --id %q", r.values, pod, id)
			}
			peers, err := derivePeers(id, raft, n)
			if err != nil {
				t.Errorf("%s: pod %s: %v", r.values, pod, err)
				continue
			}
			if gh, _, _ := net.SplitHostPort(grpc); strings.SplitN(gh, ".", 2)[0] != id {
				t.Errorf("%s: pod %s: grpc host %q's first label is not the id", r.values, pod, gh)
			}
			for _, p := range peers {
				host, port, _ := net.SplitHostPort(p)
				labels := strings.Split(host, ".")
				want := []string{"", sts.Spec.ServiceName, namespace, "svc"}
				if len(labels) < 5 || !pods[labels[0]] || labels[1] != want[1] || labels[2] != want[2] || labels[3] != want[3] || strings.Join(labels[4:], ".") != domain {
					t.Errorf("%s: pod %s derives peer %s: want <a pod of %s>.%s.%s.svc.%s", r.values, pod, p, sts.Name, want[1], want[2], domain)
				}
				if port != "7071" {
					t.Errorf("%s: pod %s derives peer %s: want the Raft port 7071", r.values, pod, p)
				}
			}
		}
		if rs, ok := r.statefulSets()[releaseName+"-rs"]; ok {
			// One address, the client Service's: a standby's leader hint
			// names the leader's own address, which the region server
			// follows (cluster/client.LeaderTracker).
			masters, _ := argValue(rs.Spec.Template.Spec.Containers[0].Args, "masters")
			if want := fmt.Sprintf("%s.%s.svc.%s:7070", sts.Name, namespace, domain); masters != want {
				t.Errorf("%s: region servers' --masters %q, want the client Service %q", r.values, masters, want)
			}
			if o, ok := r.get("Service", sts.Name); !ok {
				t.Errorf("%s: region servers' --masters names Service %s, which is not rendered", r.values, sts.Name)
			} else if svc := o.typed.(*corev1.Service); svc.Spec.ClusterIP == corev1.ClusterIPNone || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(sts.Spec.Template.Labels)) {
				t.Errorf("%s: Service %s is headless or does not select the masters", r.values, sts.Name)
			}
			rc := rs.Spec.Template.Spec.Containers[0]
			for i := range int(*rs.Spec.Replicas) {
				pod := fmt.Sprintf("%s-%d", rs.Name, i)
				env := podEnv(rc, pod)
				id, _ := argValue(rc.Args, "id")
				addr, _ := argValue(rc.Args, "grpc-addr")
				id, addr = expand(id, env), expand(addr, env)
				wantAddr := fmt.Sprintf("%s.%s.%s.svc.%s:7080", pod, rs.Spec.ServiceName, namespace, domain)
				if id != pod || addr != wantAddr {
					t.Errorf("%s: region server pod %s: --id %q --grpc-addr %q, want %q %q", r.values, pod, id, addr, pod, wantAddr)
				}
			}
			if _, ok := r.get("Service", rs.Spec.ServiceName); !ok {
				t.Errorf("%s: the region servers' serviceName %q is not a rendered Service", r.values, rs.Spec.ServiceName)
			}
		}
	}
}

// ---- volumes ----

// mountFor is the volume mounted at the deepest mount path holding path.
func mountFor(c corev1.Container, path string) (corev1.VolumeMount, bool) {
	var best corev1.VolumeMount
	found := false
	for _, m := range c.VolumeMounts {
		if (path == m.MountPath || strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")) && len(m.MountPath) >= len(best.MountPath) {
			best, found = m, true
		}
	}
	return best, found
}

// --data-dir is a directory inside a persistent volume, not its root: a
// volume's root is root's (fsGroup changes only its group), so an agent
// running as another user cannot make it 0700, and ext4 keeps lost+found
// there. Each file flag names a file the pod's volumes hold for that pod.
func TestVolumesWhereFlagsPoint(t *testing.T) {
	for _, r := range renderAll(t) {
		for name, sts := range r.statefulSets() {
			c := sts.Spec.Template.Spec.Containers[0]
			if dir, ok := argValue(c.Args, "data-dir"); ok {
				m, ok := mountFor(c, dir)
				if !ok || filepath.Clean(dir) == filepath.Clean(m.MountPath) {
					t.Errorf("%s: %s --data-dir %s is not a directory inside a mounted volume (mount %q): a volume's root is root's and may hold lost+found", r.values, name, dir, m.MountPath)
				} else {
					claim := false
					for _, vct := range sts.Spec.VolumeClaimTemplates {
						claim = claim || vct.Name == m.Name
					}
					if !claim {
						t.Errorf("%s: %s --data-dir %s is volume %q, not a volumeClaimTemplate", r.values, name, dir, m.Name)
					}
				}
			} else if c.Args[0] == "agent" {
				t.Errorf("%s: %s has no --data-dir", r.values, name)
			}
			// A group the pod's user is in makes the volume's root writable;
			// OnRootMismatch spares each restart a walk of the whole state.
			if len(sts.Spec.VolumeClaimTemplates) > 0 {
				sc := sts.Spec.Template.Spec.SecurityContext
				if sc == nil || sc.FSGroup == nil || sc.FSGroupChangePolicy == nil || *sc.FSGroupChangePolicy != corev1.FSGroupChangeOnRootMismatch {
					t.Errorf("%s: %s has volumes but no fsGroup with fsGroupChangePolicy OnRootMismatch (%+v)", r.values, name, sc)
				}
			}
			volumes := map[string]corev1.Volume{}
			for _, v := range sts.Spec.Template.Spec.Volumes {
				volumes[v.Name] = v
			}
			for i := range int(*sts.Spec.Replicas) {
				pod := fmt.Sprintf("%s-%d", sts.Name, i)
				env := podEnv(c, pod)
				for _, flag := range []string{"tls-ca", "tls-cert", "tls-key", "cluster-secret-file", "acl-bootstrap-token-file"} {
					v, ok := argValue(c.Args, flag)
					if !ok {
						continue
					}
					path := expand(v, env)
					m, ok := mountFor(c, path)
					if !ok {
						t.Errorf("%s: pod %s --%s %s: no volume is mounted there", r.values, pod, flag, path)
						continue
					}
					if !volumeHolds(volumes[m.Name], strings.TrimPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")) {
						t.Errorf("%s: pod %s --%s %s: volume %q holds no such file", r.values, pod, flag, path, m.Name)
					}
				}
				for _, e := range []string{"BATON_TLS_CA", "BATON_TLS_CERT", "BATON_TLS_KEY"} {
					if p, ok := env[e]; ok {
						if m, ok := mountFor(c, p); !ok || !volumeHolds(volumes[m.Name], strings.TrimPrefix(p, m.MountPath+"/")) {
							t.Errorf("%s: pod %s %s=%s names no mounted file", r.values, pod, e, p)
						}
					}
				}
			}
		}
	}
}

// volumeHolds says whether v (a Secret, projected Secrets or cert-manager's
// CSI driver) has a file at rel. A projected Secret may be optional: every
// ordinal's is, so that the pod template does not change with the
// replicas (TestScaleKeepsPodTemplates); a pod whose Secret is not issued
// yet starts without the file and the agent exits until it is there.
func volumeHolds(v corev1.Volume, rel string) bool {
	switch {
	case v.Secret != nil:
		if len(v.Secret.Items) == 0 {
			return !strings.Contains(rel, "/") // every key of the Secret
		}
		for _, it := range v.Secret.Items {
			if it.Path == rel {
				return true
			}
		}
	case v.CSI != nil:
		// The CSI driver's files are the pod's own: nothing optional.
		return contains(csiFiles(v), rel)
	case v.Projected != nil:
		for _, src := range v.Projected.Sources {
			if src.Secret == nil {
				continue
			}
			for _, it := range src.Secret.Items {
				if it.Path == rel {
					return true
				}
			}
		}
	}
	return false
}

// ---- secrets ----

// No Secret's value appears in a ConfigMap, an argument or a literal
// environment value, and nothing in the args looks like a credential.
func TestNoSecretInTheOpen(t *testing.T) {
	for _, r := range renderAll(t) {
		var secrets []string
		for _, o := range r.ofKind("Secret") {
			s := o.typed.(*corev1.Secret)
			for k, v := range s.Data {
				if len(v) < 8 {
					t.Errorf("%s: Secret %s key %s is only %d bytes", r.values, o.name, k, len(v))
				}
				secrets = append(secrets, string(v), base64.StdEncoding.EncodeToString(v))
			}
			for _, v := range s.StringData {
				secrets = append(secrets, v)
			}
		}
		var open []string
		for _, o := range r.ofKind("ConfigMap") {
			for _, v := range o.typed.(*corev1.ConfigMap).Data {
				open = append(open, v)
			}
		}
		for name, sts := range r.statefulSets() {
			for _, c := range sts.Spec.Template.Spec.Containers {
				open = append(open, c.Args...)
				open = append(open, c.Command...)
				for _, e := range c.Env {
					open = append(open, e.Value)
				}
				for _, f := range argFlags(c.Args) {
					if f == "cluster-secret" || f == "token" {
						t.Errorf("%s: %s passes --%s on the command line", r.values, name, f)
					}
				}
				for _, a := range append(append([]string{}, c.Args...), c.Command...) {
					if regexp.MustCompile(`bt_[0-9a-f]{16}_`).MatchString(a) {
						t.Errorf("%s: %s has a bearer token in its command line", r.values, name)
					}
				}
			}
		}
		// With access control the bootstrap token is a file from a
		// Secret (the mount is checked by TestVolumesMounted's flags):
		// the chart's, made in the form the agent takes, unless the
		// values name one.
		if master, ok := r.statefulSets()[releaseName+"-master"]; ok {
			c := master.Spec.Template.Spec.Containers[0]
			_, file := argValue(c.Args, "acl-bootstrap-token-file")
			aclOn := value(t, r, "acl.mode") == "on" || (value(t, r, "acl.mode") == "" && (value(t, r, "tls.certManager.enabled").(bool) || len(value(t, r, "tls.existingSecrets.masters").([]any)) > 0))
			if file != aclOn {
				t.Errorf("%s: --acl-bootstrap-token-file given %v, access control on %v", r.values, file, aclOn)
			}
			var made *corev1.Secret
			for _, o := range r.ofKind("Secret") {
				if o.name == releaseName+"-bootstrap-token" {
					made = o.typed.(*corev1.Secret)
				}
			}
			switch named := value(t, r, "acl.bootstrapToken.secretName").(string); {
			case !aclOn || named != "":
				if made != nil {
					t.Errorf("%s: the chart makes a bootstrap token Secret it does not use", r.values)
				}
			case made == nil:
				t.Errorf("%s: access control on, and no bootstrap token Secret", r.values)
			case !bootstrapTokenPattern.Match(made.Data["token"]):
				t.Errorf("%s: the bootstrap token Secret's value is not in the form the agent takes (bt_<16 hex>_<43 base64url>)", r.values)
			}
		}
		for _, s := range secrets {
			for _, o := range open {
				if strings.Contains(o, s) {
					t.Errorf("%s: a Secret's value is in the open: %.20q...", r.values, o)
				}
			}
		}
	}
}

// bootstrapTokenPattern is security.ParseToken's form of a bearer token.
var bootstrapTokenPattern = regexp.MustCompile(`^bt_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$`)

// ---- TLS ----

// With cert-manager, each pod's certificate names the pod's baton://
// identity: from its CSI volume (csiDriver, checkCSIPods) or from a
// Certificate's Secret; either names an Issuer the chart renders or the
// values give.
func TestCertificatesPerPod(t *testing.T) {
	for _, r := range renderAll(t) {
		certs := r.ofKind("Certificate")
		if !value(t, r, "tls.certManager.enabled").(bool) {
			if len(certs) != 0 {
				t.Errorf("%s: %d Certificates without cert-manager", r.values, len(certs))
			}
			continue
		}
		bySecret := map[string]*Certificate{}
		issuers := map[string]bool{}
		for _, o := range r.ofKind("Issuer") {
			issuers[o.name] = true
		}
		for _, o := range certs {
			c := o.typed.(*Certificate)
			bySecret[c.Spec.SecretName] = c
			if c.Spec.IssuerRef.Kind == "Issuer" && !issuers[c.Spec.IssuerRef.Name] {
				t.Errorf("%s: Certificate %s's Issuer %q is not rendered", r.values, o.name, c.Spec.IssuerRef.Name)
			}
			for _, u := range c.Spec.Usages {
				if !contains(certUsages, u) {
					t.Errorf("%s: Certificate %s: usage %q is not cert-manager's", r.values, o.name, u)
				}
			}
		}
		csi := value(t, r, "tls.certManager.csiDriver").(bool)
		// serverNames are the DNS names each role's certificates carry,
		// for the ServiceMonitor check below.
		serverNames := map[string][][]string{}
		for _, o := range certs {
			c := o.typed.(*Certificate)
			if len(c.Spec.URIs) == 1 && strings.HasPrefix(c.Spec.URIs[0], "baton://") {
				role, _, _ := strings.Cut(strings.TrimPrefix(c.Spec.URIs[0], "baton://"), "/")
				if csi && (role == "master" || role == "regionserver") {
					t.Errorf("%s: Certificate %s makes a pod's Secret (%s) with the CSI driver on", r.values, o.name, c.Spec.URIs[0])
				}
				serverNames[role] = append(serverNames[role], c.Spec.DNSNames)
			}
		}
		for role, stsName := range map[string]string{"master": releaseName + "-master", "regionserver": releaseName + "-rs"} {
			sts, ok := r.statefulSets()[stsName]
			if !ok {
				continue
			}
			var tlsVol *corev1.Volume
			for i, v := range sts.Spec.Template.Spec.Volumes {
				if v.Name == "tls" {
					tlsVol = &sts.Spec.Template.Spec.Volumes[i]
				}
			}
			if csi {
				if tlsVol == nil || tlsVol.CSI == nil {
					t.Errorf("%s: %s has no CSI tls volume with tls.certManager.csiDriver on", r.values, stsName)
					continue
				}
				serverNames[role] = append(serverNames[role], checkCSIPods(t, r, role, sts, *tlsVol, issuers)...)
				continue
			}
			if tlsVol == nil || tlsVol.Projected == nil {
				t.Errorf("%s: %s has no projected tls volume", r.values, stsName)
				continue
			}
			for i := range int(*sts.Spec.Replicas) {
				pod := fmt.Sprintf("%s-%d", stsName, i)
				var secret string
				for _, src := range tlsVol.Projected.Sources {
					for _, it := range src.Secret.Items {
						if it.Path == pod+"/tls.crt" {
							secret = src.Secret.Name
						}
					}
				}
				c, ok := bySecret[secret]
				if !ok {
					t.Errorf("%s: pod %s mounts Secret %q, which no Certificate makes", r.values, pod, secret)
					continue
				}
				want := fmt.Sprintf("baton://%s/%s", role, pod)
				if len(c.Spec.URIs) != 1 || c.Spec.URIs[0] != want {
					t.Errorf("%s: pod %s's certificate names %v, want [%s]", r.values, pod, c.Spec.URIs, want)
				}
				if !contains(c.Spec.Usages, "server auth") || !contains(c.Spec.Usages, "client auth") {
					t.Errorf("%s: pod %s's certificate usages %v, want server and client auth", r.values, pod, c.Spec.Usages)
				}
			}
		}
		// Prometheus checks a scraped pod's certificate against the
		// ServiceMonitor's serverName (a target is a pod IP).
		for _, o := range r.ofKind("ServiceMonitor") {
			var sm struct {
				Metadata struct{ Labels map[string]string } `json:"metadata"`
				Spec     struct {
					Endpoints []struct {
						TLSConfig *struct {
							ServerName string `json:"serverName"`
						} `json:"tlsConfig"`
					} `json:"endpoints"`
				} `json:"spec"`
			}
			mustJSON(t, o.raw, &sm)
			for _, ep := range sm.Spec.Endpoints {
				if ep.TLSConfig == nil || ep.TLSConfig.ServerName == "" {
					t.Errorf("%s: ServiceMonitor %s scrapes TLS without a serverName", r.values, o.name)
					continue
				}
				role := sm.Metadata.Labels["app.kubernetes.io/component"]
				if len(serverNames[role]) == 0 {
					t.Errorf("%s: ServiceMonitor %s scrapes %s pods, whose certificates are nowhere", r.values, o.name, role)
				}
				for _, names := range serverNames[role] {
					if !contains(names, ep.TLSConfig.ServerName) {
						t.Errorf("%s: ServiceMonitor %s checks serverName %s, which a %s certificate lacks (%v)", r.values, o.name, ep.TLSConfig.ServerName, role, names)
					}
				}
			}
		}
		if value(t, r, "serviceMonitor.enabled").(bool) {
			c, ok := bySecret[releaseName+"-client-prometheus-tls"]
			if !ok || len(c.Spec.URIs) != 1 || c.Spec.URIs[0] != "baton://client/prometheus" {
				t.Errorf("%s: no baton://client/prometheus certificate for the ServiceMonitor", r.values)
			}
		}
	}
}

// ---- lint ----

func TestHelmLint(t *testing.T) {
	for _, f := range ciValues(t) {
		vals := readValues(t, f, nil)
		linter := lint.All(chartDir, vals, namespace, false)
		for _, m := range linter.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("%s: helm lint: %s", filepath.Base(f), m)
			} else {
				t.Logf("%s: helm lint: %s", filepath.Base(f), m)
			}
		}
	}
}

func metaSelector(s *metav1.LabelSelector) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(s)
}

func mustJSON(t *testing.T, raw []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatal(err)
	}
}

// A scale-up after install keeps --initial-cluster-size at the install's
// count, with or without the value set, so the new ordinals join (the contract: ORDINAL >= N joins through
// members 0..N-1, which exist) instead of bootstrapping a second cluster.
func TestScaleUpKeepsInitialSize(t *testing.T) {
	objs, err := render(readValues(t, "", map[string]any{"masters": map[string]any{"replicas": 5, "initialClusterSize": 3}}))
	if err != nil {
		t.Fatal(err)
	}
	r := rendered{values: "5 masters after 3", objects: objs}
	sts := r.statefulSets()[releaseName+"-master"]
	c := sts.Spec.Template.Spec.Containers[0]
	if v, _ := argValue(c.Args, "initial-cluster-size"); v != "3" {
		t.Fatalf("--initial-cluster-size %q after a scale to 5, want the install's 3", v)
	}
	for _, pod := range []string{sts.Name + "-3", sts.Name + "-4"} {
		env := podEnv(c, pod)
		raft, _ := argValue(c.Args, "raft-addr")
		join, err := derivePeers(pod, expand(raft, env), 3)
		if err != nil {
			t.Fatal(err)
		}
		for i, j := range join {
			if !strings.HasPrefix(j, fmt.Sprintf("%s-%d.", sts.Name, i)) {
				t.Errorf("pod %s joins through %s, not an install member", pod, j)
			}
		}
	}
	// Without the value (helm template, a GitOps tool: nothing to look up)
	// a scale to 5 still renders the default 3, never the replicas.
	objs, err = render(readValues(t, "", map[string]any{"masters": map[string]any{"replicas": 5}}))
	if err != nil {
		t.Fatal(err)
	}
	c = rendered{objects: objs}.statefulSets()[releaseName+"-master"].Spec.Template.Spec.Containers[0]
	if v, _ := argValue(c.Args, "initial-cluster-size"); v != "3" {
		t.Errorf("5 replicas without masters.initialClusterSize render --initial-cluster-size %q, want the default 3 (pods 3 and 4 join)", v)
	}
	// A size no install can have is refused, saying why.
	for _, tc := range []struct {
		replicas, size int
		want           string
	}{
		{3, 0, "at least 1"},
		{5, 4, "must be odd"},
		{3, 5, "more than masters.replicas 3"},
		{1, 3, "more than masters.replicas 1"},
	} {
		_, err := render(readValues(t, "", map[string]any{"masters": map[string]any{"replicas": tc.replicas, "initialClusterSize": tc.size}}))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("replicas %d, initialClusterSize %d: err %v, want one saying %q", tc.replicas, tc.size, err, tc.want)
		}
	}
	// An anti-affinity word the chart does not know fails, not drops.
	if _, err := render(readValues(t, "", map[string]any{"masters": map[string]any{"antiAffinity": map[string]any{"node": "requried"}}})); err == nil || !strings.Contains(err.Error(), "required, preferred or none") {
		t.Errorf("a misspelt antiAffinity.node rendered (err %v)", err)
	}
}

// envFromPodName reports whether env sets name to the pod's name through
// the downward API.
func envFromPodName(env []corev1.EnvVar, name string) bool {
	for _, e := range env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name" {
			return true
		}
	}
	return false
}

// Scaling the masters (or the region servers) from 3 to 5 changes no pod
// template: a changed template makes the StatefulSet roll every pod, a
// leader change and a catch-up each, for what should only add two. The
// replica counts and the disruption budget differ; nothing in a pod may.
func TestScaleKeepsPodTemplates(t *testing.T) {
	secrets := func(prefix string, n int) []any {
		var out []any
		for i := range n {
			out = append(out, fmt.Sprintf("%s-%d-cert", prefix, i))
		}
		return out
	}
	bases := map[string]map[string]any{
		"default":     {},
		"csi":         {"tls": map[string]any{"certManager": map[string]any{"enabled": true}}},
		"per-ordinal": {"tls": map[string]any{"certManager": map[string]any{"enabled": true, "csiDriver": false}}},
		"secrets": {"tls": map[string]any{"existingSecrets": map[string]any{
			"masters": secrets("baton-master", 5), "regionServers": secrets("baton-rs", 5)}}},
	}
	for name, base := range bases {
		templates := map[int]map[string]string{}
		for _, n := range []int{3, 5} {
			over := map[string]any{
				"masters":       map[string]any{"replicas": n},
				"regionServers": map[string]any{"replicas": n},
			}
			objs, err := render(chartutil.CoalesceTables(over, readValues(t, "", base)))
			if err != nil {
				t.Fatalf("%s, %d replicas: %v", name, n, err)
			}
			templates[n] = map[string]string{}
			for sname, sts := range (rendered{objects: objs}).statefulSets() {
				js, err := json.MarshalIndent(sts.Spec.Template, "", " ")
				if err != nil {
					t.Fatal(err)
				}
				templates[n][sname] = string(js)
			}
		}
		for sname, a := range templates[3] {
			b, ok := templates[5][sname]
			if !ok {
				t.Errorf("%s: %s rendered at 3 replicas, not at 5", name, sname)
				continue
			}
			if a != b {
				t.Errorf("%s: %s's pod template differs between 3 and 5 replicas (every pod would restart):\n%s", name, sname, lineDiff(a, b))
			}
		}
	}
}

// lineDiff is the lines of a and b that the other lacks, for a readable
// failure.
func lineDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	for _, l := range al {
		if !slices.Contains(bl, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range bl {
		if !slices.Contains(al, l) {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

// Every pod the chart makes passes the "restricted" Pod Security Standard
// (kubernetes.io/docs/concepts/security/pod-security-standards), so a
// namespace that enforces it admits them: no host namespaces, ports or
// paths, non-root, no privilege escalation, only NET_BIND_SERVICE may be
// added to a dropped ALL, a RuntimeDefault or Localhost seccomp profile,
// and only the volume types the profile allows.
func TestRestrictedPodSecurity(t *testing.T) {
	allowedVolume := func(v corev1.Volume) bool {
		s := v.VolumeSource
		return s.ConfigMap != nil || s.CSI != nil || s.DownwardAPI != nil || s.EmptyDir != nil || s.Ephemeral != nil ||
			s.PersistentVolumeClaim != nil || s.Projected != nil || s.Secret != nil
	}
	for _, r := range renderAll(t) {
		pods := map[string]corev1.PodSpec{}
		for name, sts := range r.statefulSets() {
			pods["StatefulSet "+name] = sts.Spec.Template.Spec
		}
		for name, cj := range r.cronJobs() {
			pods["CronJob "+name] = cj.Spec.JobTemplate.Spec.Template.Spec
		}
		for name, p := range pods {
			bad := func(format string, args ...any) {
				t.Errorf("%s: %s: %s", r.values, name, fmt.Sprintf(format, args...))
			}
			if p.HostNetwork || p.HostPID || p.HostIPC {
				bad("host namespaces")
			}
			psc := p.SecurityContext
			if psc == nil {
				psc = &corev1.PodSecurityContext{}
			}
			if psc.RunAsUser != nil && *psc.RunAsUser == 0 {
				bad("pod runAsUser 0")
			}
			for _, v := range p.Volumes {
				if !allowedVolume(v) {
					bad("volume %s is of a type the restricted profile refuses", v.Name)
				}
			}
			for _, c := range append(append([]corev1.Container{}, p.InitContainers...), p.Containers...) {
				sc := c.SecurityContext
				if sc == nil {
					sc = &corev1.SecurityContext{}
				}
				nonRoot := (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (sc.RunAsNonRoot == nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot)
				if !nonRoot {
					bad("container %s: runAsNonRoot is not true", c.Name)
				}
				if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
					bad("container %s: runAsUser 0", c.Name)
				}
				if sc.Privileged != nil && *sc.Privileged {
					bad("container %s: privileged", c.Name)
				}
				if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
					bad("container %s: allowPrivilegeEscalation is not false", c.Name)
				}
				if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
					bad("container %s: capabilities do not drop ALL", c.Name)
				} else {
					for _, a := range sc.Capabilities.Add {
						if a != "NET_BIND_SERVICE" {
							bad("container %s: adds capability %s", c.Name, a)
						}
					}
				}
				seccomp := psc.SeccompProfile
				if sc.SeccompProfile != nil {
					seccomp = sc.SeccompProfile
				}
				if seccomp == nil || (seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault && seccomp.Type != corev1.SeccompProfileTypeLocalhost) {
					bad("container %s: seccompProfile %v, want RuntimeDefault (or Localhost)", c.Name, seccomp)
				}
				for _, port := range c.Ports {
					if port.HostPort != 0 {
						bad("container %s: hostPort %d", c.Name, port.HostPort)
					}
				}
			}
		}
	}
}

// Secrets the chart generates (randAlphaNum) are kept by lookup on an
// upgrade and by helm.sh/resource-policy: keep on an uninstall; a render
// that cannot look up (helm template, GitOps) would make new ones, so
// each can come from an existing Secret instead, and then the chart makes
// none.
func TestGeneratedSecretsKept(t *testing.T) {
	for _, r := range renderAll(t) {
		for _, o := range r.ofKind("Secret") {
			s := o.typed.(*corev1.Secret)
			if s.Annotations["helm.sh/resource-policy"] != "keep" {
				t.Errorf("%s: Secret %s is generated but not kept (helm.sh/resource-policy: keep): an uninstall and reinstall on the same volumes would change it", r.values, o.name)
			}
		}
	}
	for name, vals := range map[string]map[string]any{
		"cluster secret": {"clusterSecret": map[string]any{"existingSecret": "mine", "secretKey": "k"}},
		"bootstrap token": {"tls": map[string]any{"certManager": map[string]any{"enabled": true}},
			"acl": map[string]any{"bootstrapToken": map[string]any{"secretName": "mine", "secretKey": "k"}}},
	} {
		objs, err := render(readValues(t, "", vals))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r := rendered{values: name + " given", objects: objs}
		if s := r.ofKind("Secret"); len(s) != 0 {
			t.Errorf("%s: an existing Secret is given, yet the chart makes Secret %s", r.values, s[0].name)
		}
		sts := r.statefulSets()[releaseName+"-master"]
		found := false
		for _, v := range sts.Spec.Template.Spec.Volumes {
			if v.Secret != nil && v.Secret.SecretName == "mine" {
				found = len(v.Secret.Items) == 1 && v.Secret.Items[0].Key == "k"
			}
		}
		if !found {
			t.Errorf("%s: the masters do not mount key k of Secret mine", r.values)
		}
	}
}

// A container with a memory limit runs with GOMEMLIMIT about 90% of it,
// so that the Go runtime collects harder near the limit instead of the
// kernel killing the pod; masters keep the agent's GOGC 200, which it
// drops when GOMEMLIMIT is set.
func TestGoMemLimit(t *testing.T) {
	for _, r := range renderAll(t) {
		for name, sts := range r.statefulSets() {
			c := sts.Spec.Template.Spec.Containers[0]
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			lim, ok := c.Resources.Limits[corev1.ResourceMemory]
			if !ok {
				continue
			}
			v, ok := env["GOMEMLIMIT"]
			mib, err := strconv.ParseInt(strings.TrimSuffix(v, "MiB"), 10, 64)
			if !ok || err != nil {
				t.Errorf("%s: %s has a memory limit %s but GOMEMLIMIT %q (want NMiB)", r.values, name, lim.String(), v)
				continue
			}
			if got, want := float64(mib<<20)/float64(lim.Value()), 0.9; got < want-0.01 || got > want {
				t.Errorf("%s: %s GOMEMLIMIT %s is %.3f of the limit %s, want 0.9", r.values, name, v, got, lim.String())
			}
			if c.Args[0] == "agent" && env["GOGC"] != "200" {
				t.Errorf("%s: %s sets GOMEMLIMIT but GOGC %q: the agent keeps its 200 only when neither is set", r.values, name, env["GOGC"])
			}
		}
	}
	// 1.5Gi cannot be computed by the template: it says so.
	_, err := render(readValues(t, "", map[string]any{"masters": map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "1.5Gi"}}}}))
	if err == nil || !strings.Contains(err.Error(), "masters.goMemLimit") {
		t.Errorf("a 1.5Gi limit rendered (err %v), want a refusal naming masters.goMemLimit", err)
	}
	objs, err := render(readValues(t, "", map[string]any{"masters": map[string]any{"goMemLimit": "1400MiB", "resources": map[string]any{"limits": map[string]any{"memory": "1.5Gi"}}}}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range (rendered{objects: objs}).statefulSets()[releaseName+"-master"].Spec.Template.Spec.Containers[0].Env {
		found = found || (e.Name == "GOMEMLIMIT" && e.Value == "1400MiB")
	}
	if !found {
		t.Error("masters.goMemLimit 1400MiB is not the masters' GOMEMLIMIT")
	}
}

// listenHost moves where the pods listen: "::" (dual stack) is one
// --listen-host and a bracketed --http-addr host the agent accepts.
func TestListenHost(t *testing.T) {
	objs, err := render(readValues(t, "", map[string]any{"listenHost": "::"}))
	if err != nil {
		t.Fatal(err)
	}
	for name, sts := range (rendered{objects: objs}).statefulSets() {
		c := sts.Spec.Template.Spec.Containers[0]
		lh, _ := argValue(c.Args, "listen-host")
		ha, _ := argValue(c.Args, "http-addr")
		host, _, err := net.SplitHostPort(ha)
		if lh != "::" || err != nil || host != "::" {
			t.Errorf("%s: listenHost \"::\" gives --listen-host %q --http-addr %q (%v), want :: and [::]:PORT", name, lh, ha, err)
		}
	}
}
