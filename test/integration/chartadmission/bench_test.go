// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package chartadmission_test

import (
	"context"
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
)

// BenchmarkAdmission measures the whole admission handler (decode, mutate, JSON patch) on the real rendered objects;
// `make bench` reports the same beside its floors.
func BenchmarkAdmission(b *testing.B) {
	rendered, err := ciliumchart.Render("1.19.7", ciliumchart.Values("1.19.7"))
	if err != nil {
		b.Fatal(err)
	}
	t := &testing.T{}
	a := newAdmitter(t, append(selfHostedShoot(), rendered.Agent)...)
	for _, tc := range []struct {
		name string
		obj  client.Object
		wh   int
	}{
		{"DaemonSet", rendered.Agent, 0},
		{"Deployment", rendered.Operator, 1},
		{"ConfigMap", rendered.Config, 2},
		{"PodOnControlPlane", ciliumchart.DaemonSetPod(rendered.Agent, "cp-1"), 0},
		{"PodOnWorker", ciliumchart.DaemonSetPod(rendered.Agent, "worker-0"), 0},
	} {
		raw, _ := json.Marshal(tc.obj)
		gvk, err := apiutil.GVKForObject(tc.obj, a.scheme)
		if err != nil {
			b.Fatal(err)
		}
		req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			UID: "bench", Kind: metav1.GroupVersionKind(gvk), Operation: admissionv1.Create,
			Namespace: tc.obj.GetNamespace(), Object: runtime.RawExtension{Raw: raw},
		}}
		handler := a.webhooks[tc.wh].Webhook
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if resp := handler.Handle(context.Background(), req); !resp.Allowed || len(resp.Patches) == 0 {
					b.Fatalf("allowed %v, %d patch operations", resp.Allowed, len(resp.Patches))
				}
			}
		})
	}
}
