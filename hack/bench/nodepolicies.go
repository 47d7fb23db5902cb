// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// Section 11: 1,000 Nodes whose kubelets each write their status every 10 s (kubelet's nodeStatusUpdateFrequency
// while a condition changes: 100 writes a second at kube-apiserver), and a burst of all 1,000 at once (the nodes back
// together after an outage), with the chart's Node policies bound and without them, alternately, on one kube-apiserver
// with the Node authorizer and NodeRestriction.
const (
	benchNodes      = 1000
	steadyRate      = 100 // writes per second
	steadyDuration  = 20 * time.Second
	nodePolicyRound = 4
	labelerUser     = "bench:labeler"
)

// nodeWrites runs section 11.
func nodeWrites(r *report) error {
	ctx := context.Background()
	env, err := testenv.Start(testenv.Options{NodeRestriction: true})
	if err != nil {
		return err
	}
	defer env.Stop()
	if err := env.CreateSelfHostedShoot(ctx, fixtures.WithExposureConfig(fixtures.Shoot(true), fixtures.ExposureConfigL2)); err != nil {
		return err
	}
	port, err := testenv.FreePort()
	if err != nil {
		return err
	}
	if _, err := env.InstallChart(ctx, port); err != nil {
		return err
	}
	var bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	list := &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{}
	if err := env.Client.List(ctx, list); err != nil {
		return err
	}
	for i := range list.Items {
		if b := &list.Items[i]; strings.HasSuffix(b.Name, "-guard-control-plane-membership") || strings.HasSuffix(b.Name, "-confine-node-writes") {
			bindings = append(bindings, b)
		}
	}
	if len(bindings) != 2 {
		return fmt.Errorf("the chart's Node policies: %d bindings, want 2", len(bindings))
	}
	names := make([]string, benchNodes)
	for i := range names {
		names[i] = fmt.Sprintf("node-%04d", i)
		if err := env.Client.Create(ctx, fixtures.Node(names[i], fmt.Sprintf("10.1.%d.%d", i/250, 1+i%250), false)); err != nil {
			return err
		}
	}
	// The probe of whether the policies hold: a user RBAC lets patch Nodes, labelling one a control-plane node.
	for _, obj := range []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: labelerUser}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"patch"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: labelerUser}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: labelerUser},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: labelerUser}}},
	} {
		if err := env.Client.Create(ctx, obj); err != nil {
			return err
		}
	}
	config := rest.CopyConfig(env.Config)
	config.QPS, config.Burst = -1, 0
	cs, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	bound := func(want bool) error {
		return testenv.WaitFor(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			err := cs.CoreV1().RESTClient().Patch(types.MergePatchType).Resource("nodes").Name(names[0]).Param("dryRun", "All").
				SetHeader("Impersonate-User", labelerUser).Body([]byte(`{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`)).Do(ctx).Error()
			return (err != nil && strings.Contains(err.Error(), "guard-control-plane-membership")) == want, nil
		})
	}

	// A burst first that counts for neither: the first thousand concurrent writes open the client's connections.
	if err := (&nodeWriteLatencies{}).burstOnce(ctx, cs, names); err != nil {
		return err
	}
	const section = "11. Node status writes of 1,000 kubelets through the chart's Node policies (envtest, NodeRestriction)"
	measured := map[bool]*nodeWriteLatencies{true: {}, false: {}}
	for round := range nodePolicyRound {
		for _, withPolicies := range []bool{round%2 == 1, round%2 == 0} {
			for _, b := range bindings {
				var err error
				if withPolicies {
					b := b.DeepCopy()
					b.ResourceVersion = ""
					err = client.IgnoreAlreadyExists(env.Client.Create(ctx, b))
				} else {
					err = client.IgnoreNotFound(env.Client.Delete(ctx, b))
				}
				if err != nil {
					return err
				}
			}
			if err := bound(withPolicies); err != nil {
				return fmt.Errorf("the Node policies bound %t: %w", withPolicies, err)
			}
			if err := measured[withPolicies].measure(ctx, cs, names); err != nil {
				return err
			}
		}
	}
	with, without := measured[true], measured[false]
	r.Notes = append(r.Notes, fmt.Sprintf("Section 11, the bursts one by one, in the order they ran (ABBA rounds): with the policies %v, without %v", roundMS(with.bursts), roundMS(without.bursts)))
	for _, q := range []struct {
		name string
		q    float64
	}{{"median", 0.5}, {"p99", 0.99}} {
		r.add(Result{Section: section, Name: fmt.Sprintf("%s status write at %d/s, with the policies", q.name, steadyRate), Value: ms(quantile(with.steady, q.q)), Unit: "ms",
			Baseline: ms(quantile(without.steady, q.q)), BaselineName: "without them"})
	}
	r.add(Result{Section: section, Name: fmt.Sprintf("median burst of %d status writes at once, until the last is done, with the policies", benchNodes), Value: ms(quantile(with.bursts, 0.5)), Unit: "ms",
		Baseline: ms(quantile(without.bursts, 0.5)), BaselineName: "without them"})
	r.add(Result{Section: section, Name: "p99 status write in the burst, with the policies", Value: ms(quantile(with.burst, 0.99)), Unit: "ms",
		Baseline: ms(quantile(without.burst, 0.99)), BaselineName: "without them"})
	return nil
}

// nodeWriteLatencies are the latencies of the status writes of one configuration over the rounds.
type nodeWriteLatencies struct {
	steady, burst []time.Duration
	// bursts are how long each burst took, from its first write to its last answer.
	bursts []time.Duration
}

// measure writes the Nodes' statuses at steadyRate for steadyDuration, then all of them at once, as their kubelets.
func (l *nodeWriteLatencies) measure(ctx context.Context, cs kubernetes.Interface, names []string) error {
	var steady statusWrites
	tick := time.NewTicker(time.Second / steadyRate)
	for i := range int(steadyDuration.Seconds()) * steadyRate {
		<-tick.C
		steady.start(ctx, cs, names[i%len(names)])
	}
	tick.Stop()
	if err := steady.wait(&l.steady); err != nil {
		return err
	}
	return l.burstOnce(ctx, cs, names)
}

// burstOnce writes every Node's status at once, as each Node's kubelet.
func (l *nodeWriteLatencies) burstOnce(ctx context.Context, cs kubernetes.Interface, names []string) error {
	var burst statusWrites
	start := time.Now()
	for _, name := range names {
		burst.start(ctx, cs, name)
	}
	err := burst.wait(&l.burst)
	l.bursts = append(l.bursts, time.Since(start))
	return err
}

// statusWrites are kubelets' status writes in flight and what they took.
type statusWrites struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	took []time.Duration
	errs []error
}

// start writes Node name's status as its kubelet, in the background.
func (w *statusWrites) start(ctx context.Context, cs kubernetes.Interface, name string) {
	w.wg.Go(func() {
		took, err := writeNodeStatus(ctx, cs, name)
		w.mu.Lock()
		defer w.mu.Unlock()
		if err != nil {
			w.errs = append(w.errs, err)
			return
		}
		w.took = append(w.took, took)
	})
}

// wait waits for the writes, adds what they took to into and fails if any failed.
func (w *statusWrites) wait(into *[]time.Duration) error {
	w.wg.Wait()
	*into = append(*into, w.took...)
	if len(w.errs) > 0 {
		return fmt.Errorf("%d of the kubelets' status writes failed, the first: %w", len(w.errs), w.errs[0])
	}
	return nil
}

// writeNodeStatus patches the Ready condition's heartbeat of Node name as its kubelet does and says how long it took.
func writeNodeStatus(ctx context.Context, cs kubernetes.Interface, name string) (time.Duration, error) {
	start := time.Now()
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"kubelet is posting ready status","lastHeartbeatTime":%q}]}}`,
		start.UTC().Format(time.RFC3339))
	err := cs.CoreV1().RESTClient().Patch(types.StrategicMergePatchType).Resource("nodes").Name(name).SubResource("status").
		SetHeader("Impersonate-User", "system:node:"+name).SetHeader("Impersonate-Group", "system:nodes", "system:authenticated").
		Body([]byte(patch)).Do(ctx).Error()
	return time.Since(start), err
}

func quantile(d []time.Duration, q float64) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

func roundMS(d []time.Duration) []string {
	out := make([]string, len(d))
	for i, x := range d {
		out[i] = x.Round(time.Millisecond).String()
	}
	return out
}
