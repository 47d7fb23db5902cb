// Package selfhosted tells whether the cluster this extension runs in is a Gardener self-hosted shoot (GEP-36).
package selfhosted

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1beta1helper "github.com/gardener/gardener/pkg/api/core/v1beta1/helper"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"
	"github.com/gardener/gardener/pkg/extensions"
)

// ClusterName is the name of the Cluster resource of a self-hosted shoot: Gardener names it after the control-plane
// namespace, which is kube-system when the shoot hosts its own control plane.
const ClusterName = "kube-system"

// IsShoot tells whether the Cluster `kube-system` exists and describes a self-hosted shoot, i.e. one with a worker
// pool that runs the control plane. A missing Cluster is not an error: the cluster then simply is not self-hosted.
func IsShoot(ctx context.Context, reader client.Reader) (bool, error) {
	cluster := &extensionsv1alpha1.Cluster{}
	if err := reader.Get(ctx, client.ObjectKey{Name: ClusterName}, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading Cluster %s: %w", ClusterName, err)
	}
	shoot, err := extensions.ShootFromCluster(cluster)
	if err != nil {
		return false, fmt.Errorf("decoding the shoot of Cluster %s: %w", ClusterName, err)
	}
	return shoot != nil && v1beta1helper.IsShootSelfHosted(shoot.Spec.Provider.Workers), nil
}
