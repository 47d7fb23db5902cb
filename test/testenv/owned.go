package testenv

import (
	"context"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	ciliumv2alpha1 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2alpha1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
)

// Owned counts the objects of the exposure namespace/name by kind, as found by its labels; kinds without objects are
// left out.
func (e *Env) Owned(ctx context.Context, namespace, name string) (map[string]int, error) {
	counts := map[string]int{}
	for kind, list := range map[string]client.ObjectList{
		"Service":                    &corev1.ServiceList{},
		"EndpointSlice":              &discoveryv1.EndpointSliceList{},
		"CiliumLoadBalancerIPPool":   &ciliumv2.CiliumLoadBalancerIPPoolList{},
		"CiliumL2AnnouncementPolicy": &ciliumv2alpha1.CiliumL2AnnouncementPolicyList{},
		"CiliumBGPAdvertisement":     &ciliumv2.CiliumBGPAdvertisementList{},
		"CiliumBGPClusterConfig":     &ciliumv2.CiliumBGPClusterConfigList{},
		"CiliumBGPPeerConfig":        &ciliumv2.CiliumBGPPeerConfigList{},
	} {
		if err := e.Client.List(ctx, list, client.MatchingLabels(resources.Labels(name, namespace))); err != nil {
			return nil, err
		}
		if n := meta.LenList(list); n > 0 {
			counts[kind] = n
		}
	}
	return counts, nil
}
