package deploy

// The chart is checked without a Kubernetes cluster: rendered with Helm's
// own engine for each values file in helm/baton/ci, every object decoded
// strictly into its typed form (a misspelt or misplaced field fails), then
// checked for what a reviewer would look at.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const (
	chartDir    = "helm/baton"
	releaseName = "baton"
	namespace   = "baton-test"
)

// object is one rendered manifest: its kind, name, source template, and
// its decoded, typed form.
type object struct {
	kind, name, source string
	raw                []byte
	typed              any
}

// rendered is one values file's objects.
type rendered struct {
	values  string
	vals    map[string]any
	objects []object
}

func (r rendered) ofKind(kind string) []object {
	var out []object
	for _, o := range r.objects {
		if o.kind == kind {
			out = append(out, o)
		}
	}
	return out
}

func (r rendered) get(kind, name string) (object, bool) {
	for _, o := range r.objects {
		if o.kind == kind && o.name == name {
			return o, true
		}
	}
	return object{}, false
}

func (r rendered) statefulSets() map[string]*appsv1.StatefulSet {
	out := map[string]*appsv1.StatefulSet{}
	for _, o := range r.ofKind("StatefulSet") {
		out[o.name] = o.typed.(*appsv1.StatefulSet)
	}
	return out
}

// ciValues are the values files every check runs on.
func ciValues(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"default", "tls-cert-manager", "tls-cert-manager-csi", "tls-secrets", "five-masters", "no-regionservers", "snapshots", "snapshots-tls", "snapshots-tls-secrets", "gitops", "dev"}
	for _, w := range want {
		if !contains(files, filepath.Join(chartDir, "ci", w+"-values.yaml")) {
			t.Fatalf("ci values file %s-values.yaml missing (have %v)", w, files)
		}
	}
	return files
}

func readValues(t *testing.T, file string, overrides map[string]any) map[string]any {
	t.Helper()
	vals := map[string]any{}
	if file != "" {
		v, err := chartutil.ReadValuesFile(file)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		vals = v.AsMap()
	}
	return chartutil.CoalesceTables(overrides, vals)
}

// render renders the chart as `helm install --dry-run` would without a
// cluster (lookup finds nothing), strict about missing values.
func render(vals map[string]any) ([]object, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, fmt.Errorf("load chart: %w", err)
	}
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	files, err := engine.Engine{Strict: true}.Render(ch, top)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []object
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue // NOTES.txt, helpers
		}
		for _, doc := range releaseutil.SplitManifests(files[name]) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			o, err := decode(name, []byte(doc))
			if err != nil {
				return nil, err
			}
			out = append(out, o)
		}
	}
	return out, nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// decode decodes one manifest strictly into the type of its kind: a field
// the type does not have fails, as it would fail (or be dropped) at apply.
func decode(source string, doc []byte) (object, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return object{}, fmt.Errorf("%s: %w", source, err)
	}
	var typed any
	switch head.APIVersion + " " + head.Kind {
	case "apps/v1 StatefulSet":
		typed = &appsv1.StatefulSet{}
	case "v1 Service":
		typed = &corev1.Service{}
	case "v1 PersistentVolumeClaim":
		typed = &corev1.PersistentVolumeClaim{}
	case "batch/v1 CronJob":
		typed = &batchv1.CronJob{}
	case "v1 Secret":
		typed = &corev1.Secret{}
	case "v1 ConfigMap":
		typed = &corev1.ConfigMap{}
	case "policy/v1 PodDisruptionBudget":
		typed = &policyv1.PodDisruptionBudget{}
	case "monitoring.coreos.com/v1 ServiceMonitor":
		typed = &monitoringv1.ServiceMonitor{}
	case "cert-manager.io/v1 Issuer":
		typed = &Issuer{}
	case "cert-manager.io/v1 Certificate":
		typed = &Certificate{}
	default:
		return object{}, fmt.Errorf("%s: %s %q: a kind this test does not know (add its type)", source, head.APIVersion+" "+head.Kind, head.Metadata.Name)
	}
	if err := yaml.UnmarshalStrict(doc, typed); err != nil {
		return object{}, fmt.Errorf("%s: %s %q does not decode strictly: %w", source, head.Kind, head.Metadata.Name, err)
	}
	if head.Metadata.Namespace != namespace {
		return object{}, fmt.Errorf("%s: %s %q in namespace %q, want the release's %q", source, head.Kind, head.Metadata.Name, head.Metadata.Namespace, namespace)
	}
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return object{}, err
	}
	return object{kind: head.Kind, name: head.Metadata.Name, source: source, raw: js, typed: typed}, nil
}

// renderAll renders every ci values file once per test binary.
var renderCache = map[string]rendered{}

func renderAll(t *testing.T) []rendered {
	t.Helper()
	var out []rendered
	for _, f := range ciValues(t) {
		r, ok := renderCache[f]
		if !ok {
			vals := readValues(t, f, nil)
			objs, err := render(vals)
			if err != nil {
				t.Fatalf("%s: %v", filepath.Base(f), err)
			}
			r = rendered{values: filepath.Base(f), vals: vals, objects: objs}
			renderCache[f] = r
		}
		out = append(out, r)
	}
	return out
}

func contains[T comparable](xs []T, x T) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// value reads a dotted path from the coalesced values (chart defaults
// under the file's).
func value(t *testing.T, r rendered, path string) any {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	all, err := chartutil.CoalesceValues(ch, r.vals)
	if err != nil {
		t.Fatal(err)
	}
	v, err := all.PathValue(path)
	if err != nil {
		t.Fatalf("%s: value %s: %v", r.values, path, err)
	}
	return v
}

func intValue(t *testing.T, r rendered, path string) int {
	t.Helper()
	switch v := value(t, r, path).(type) {
	case float64:
		return int(v)
	case int:
		return v
	case int64:
		return int(v)
	default:
		t.Fatalf("%s: %s is %T, not a number", r.values, path, v)
		return 0
	}
}

func TestChartRendersStrictly(t *testing.T) {
	for _, r := range renderAll(t) {
		kinds := map[string]int{}
		for _, o := range r.objects {
			kinds[o.kind]++
		}
		if kinds["StatefulSet"] == 0 || kinds["Service"] < 2 {
			t.Errorf("%s: rendered %v, want the masters' StatefulSet and Services", r.values, kinds)
		}
		t.Logf("%s: %v", r.values, kinds)
	}
}

// The dashboard the chart ships is docker/grafana's, byte for byte.
func TestDashboardIsTheComposeOne(t *testing.T) {
	chartCopy, err := os.ReadFile(filepath.Join(chartDir, "files", "baton-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(filepath.Join("..", "docker", "grafana", "baton-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(chartCopy, orig) {
		t.Fatalf("deploy/helm/baton/files/baton-dashboard.json differs from docker/grafana/baton-dashboard.json: copy it again")
	}
	if !json.Valid(orig) {
		t.Fatal("the dashboard is not JSON")
	}
	for _, r := range renderAll(t) {
		for _, o := range r.ofKind("ConfigMap") {
			cm := o.typed.(*corev1.ConfigMap)
			if cm.Labels["grafana_dashboard"] != "1" {
				t.Errorf("%s: ConfigMap %s lacks the sidecar label grafana_dashboard: \"1\"", r.values, o.name)
			}
			if strings.TrimRight(cm.Data["baton-dashboard.json"], "\n") != strings.TrimRight(string(orig), "\n") {
				t.Errorf("%s: ConfigMap %s's dashboard is not the file's", r.values, o.name)
			}
		}
	}
}

func (r rendered) cronJobs() map[string]*batchv1.CronJob {
	out := map[string]*batchv1.CronJob{}
	for _, o := range r.ofKind("CronJob") {
		out[o.name] = o.typed.(*batchv1.CronJob)
	}
	return out
}
