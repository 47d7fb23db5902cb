// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserveraccess_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
	"github.com/gardener/gardener-extension-cilium-selfhosted/webhook/apiserveraccess"
)

// admitter sends kube-apiserver's AdmissionReview for creating an agent pod on cp-0 straight to one webhook server,
// trusting the CA of the registered webhook configuration.
func admitter(t *testing.T, addr string) func(context.Context) error {
	t.Helper()
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: testenv.WebhookConfigName}, mwc); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(mwc.Webhooks[0].ClientConfig.CABundle) {
		t.Fatal("no CA in the caBundle")
	}
	pod := ciliumchart.DaemonSetPod(renderWhenMutating(t).Agent, "cp-0")
	pod.Name = "replica-probe"
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	review, err := json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID("replica-probe"), Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: cilium.Namespace, Name: pod.Name,
			Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}}}
	t.Cleanup(hc.CloseIdleConnections)
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+addr+"/"+apiserveraccess.AgentWebhookName, bytes.NewReader(review))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		answer := &admissionv1.AdmissionReview{}
		if err := json.NewDecoder(resp.Body).Decode(answer); err != nil {
			return err
		}
		if answer.Response == nil || !answer.Response.Allowed || len(answer.Response.Patch) == 0 {
			return fmt.Errorf("answer %+v, want the pod allowed with a patch", answer.Response)
		}
		return nil
	}
}

// TestReplicaServesWebhooksAndTakesOver: a second extension process serves the webhooks while the first one leads,
// and keeps answering, without a gap, while the leader dies (killed, as with its node) until it has taken over the
// controllers, which then work: a new control-plane node reaches the endpoints ConfigMap.
func TestReplicaServesWebhooksAndTakesOver(t *testing.T) {
	ctx := context.Background()
	replica, addr, err := env.Extensions().StartReplica()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Extensions().StartAgain()
		replica.Stop(context.Background())
		if t.Failed() {
			t.Logf("--- replica log (tail) ---\n%s", replica.LogTail(30))
		}
	})
	admit := admitter(t, addr)
	if err := testenv.WaitFor(ctx, time.Minute, func(ctx context.Context) (bool, error) { return admit(ctx) == nil, nil }); err != nil {
		t.Fatalf("the replica does not answer admissions: %v (last: %v)", err, admit(ctx))
	}
	lease, err := leaderLease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := ptr.Deref(lease.Spec.HolderIdentity, "")

	// Admissions to the replica, every 100 ms, from before the leader dies until the replica leads.
	stopAdmitting := admitContinuously(ctx, admit)
	env.Extensions().Stop(ctx, true)
	if err := testenv.WaitFor(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		lease, err := leaderLease(ctx)
		return err == nil && ptr.Deref(lease.Spec.HolderIdentity, "") != "" && *lease.Spec.HolderIdentity != leader, err
	}); err != nil {
		t.Fatalf("the replica did not take over from %s: %v", leader, err)
	}
	if answered, failures := stopAdmitting(); len(failures) > 0 || answered == 0 {
		t.Errorf("while the leader died, the replica answered %d admissions and failed %d: %v", answered, len(failures), failures)
	}

	// The controllers run in the replica now.
	if err := endpointsFollowNewNode(t, "cp-replica", "10.0.1.15"); err != nil {
		t.Errorf("the endpoints do not follow a new control-plane node under the new leader: %v", err)
	}
}

// endpointsFollowNewNode creates a control-plane node and waits until the endpoints ConfigMap lists it, which only a
// leading extension's controllers do; the node is deleted again when the test ends.
func endpointsFollowNewNode(t *testing.T, name, ip string) error {
	t.Helper()
	ctx := context.Background()
	node := fixtures.Node(name, ip, true)
	if err := env.CreateNode(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Client.Delete(ctx, node); err != nil {
			t.Error(err)
		}
		if err := waitForURLs(ctx, fixtures.ControlPlaneURLs); err != nil {
			t.Error(err)
		}
	})
	return waitForURLs(ctx, fixtures.ControlPlaneURLs+",https://"+ip+":443")
}

// admitContinuously sends an admission every 100 ms until the returned function is called, which reports how many
// were answered and the failures.
func admitContinuously(ctx context.Context, admit func(context.Context) error) func() (answered int, failures []error) {
	var (
		mu       sync.Mutex
		answers  int
		failed   []error
		probing  context.Context
		stop     context.CancelFunc
		finished = make(chan struct{})
	)
	probing, stop = context.WithCancel(ctx)
	go func() {
		defer close(finished)
		for probing.Err() == nil {
			err := admit(probing)
			mu.Lock()
			if err != nil && probing.Err() == nil {
				failed = append(failed, fmt.Errorf("%s: %w", time.Now().Format(time.StampMilli), err))
			} else if err == nil {
				answers++
			}
			mu.Unlock()
			select {
			case <-probing.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() (int, []error) {
		stop()
		<-finished
		mu.Lock()
		defer mu.Unlock()
		return answers, failed
	}
}
