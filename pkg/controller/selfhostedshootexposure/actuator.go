// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package selfhostedshootexposure

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extensionscontroller "github.com/gardener/gardener/extensions/pkg/controller"
	extensionsselfhostedshootexposure "github.com/gardener/gardener/extensions/pkg/controller/selfhostedshootexposure"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"
	reconcilerutils "github.com/gardener/gardener/pkg/controllerutils/reconciler"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/addressing"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/ciliumconfig"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/config"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/health"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/network"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
)

// Conditions that Cilium's LB-IPAM writes (operator/pkg/lbipam).
const (
	conditionIPAMRequestSatisfied = "cilium.io/IPAMRequestSatisfied"
	conditionPoolConflict         = "cilium.io/PoolConflict"
	// conditionPoolIPsUsed counts the pool's addresses that LB-IPAM has allocated (operator/pkg/lbipam/lbipam.go).
	conditionPoolIPsUsed = "cilium.io/IPsUsed"
)

// reasonAnnounced is the reason of the event that says which nodes announce the VIP.
const reasonAnnounced = "Announced"

type actuator struct {
	client   client.Client
	recorder events.EventRecorder
	// reader reads without the cache: the cache may lag behind what was applied.
	reader client.Reader
	// owned lists what exposures own, from informers once they have synced.
	owned lister
	// ingressWait is how long Reconcile waits for LB-IPAM within one call, polling the cache every pollInterval.
	// gardenadm counts an exposure with a lastError as failed after ~30s, so the VIP should come within the call
	// rather than after a requeue.
	ingressWait, pollInterval time.Duration
	// health probes the exposures' endpoints.
	health *health.Registry
	// procNet is where the routes of the extension's node are read (network.ProcNet).
	procNet string
}

// NewActuator returns the actuator of SelfHostedShootExposures of type cilium.
func NewActuator(c client.Client, reader client.Reader, recorder events.EventRecorder, owned lister, ingressWait time.Duration, probes *health.Registry) extensionsselfhostedshootexposure.Actuator {
	return &actuator{client: c, reader: reader, recorder: recorder, owned: owned, ingressWait: ingressWait, pollInterval: 20 * time.Millisecond, health: probes, procNet: network.ProcNet}
}

// lister is what deleteOwned reads: kube-apiserver (a client.Reader) or the informers of ownedObjects.
type lister interface {
	List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error
}

// Reconcile applies the desired objects, removes those no longer desired, and returns the VIP once Cilium has
// assigned it. Bad input fails before anything is applied or deleted.
func (a *actuator) Reconcile(ctx context.Context, log logr.Logger, exp *extensionsv1alpha1.SelfHostedShootExposure, _ *extensionscontroller.Cluster) ([]corev1.LoadBalancerIngress, error) {
	// The providerConfig comes from the Cluster (config.Raw), which gardenlet updates right before it asks for this
	// reconciliation; the generic reconciler's copy comes from the cache, which may not have that update yet.
	cluster, err := extensionscontroller.GetCluster(ctx, a.reader, exp.Namespace)
	if err != nil {
		return nil, err
	}
	loaded, err := config.Load(exp, cluster.Shoot, a.site(ctx, log))
	if err != nil {
		return nil, err
	}
	cfg := loaded.Config
	if err := config.CheckPrerequisites(cluster.Shoot, cfg); err != nil {
		return nil, err
	}
	in := loaded.Input(exp)
	addresses, err := resources.EndpointAddresses(in)
	if err != nil {
		return nil, err
	}
	a.health.Track(client.ObjectKeyFromObject(exp), addresses)
	states := a.health.States(addresses)
	notReady, allFailing := health.Publish(states)
	in.NotReady = notReady
	objs, err := resources.Build(in)
	if err != nil {
		return nil, err
	}
	if err := a.reportEndpoints(ctx, exp, states, notReady, allFailing); err != nil {
		return nil, err
	}
	// Read by name, not from the cache: the extension watches no ConfigMap of kube-system but its own.
	ciliumConfig := &corev1.ConfigMap{}
	if err := a.reader.Get(ctx, client.ObjectKey{Namespace: cilium.Namespace, Name: cilium.ConfigMapName}, ciliumConfig); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("no Cilium installed: ConfigMap %s/%s not found", cilium.Namespace, cilium.ConfigMapName)
		}
		return nil, err
	}
	if err := ciliumconfig.Check(ciliumConfig.Data, cfg); err != nil {
		return nil, err
	}

	log.Info("Applying exposure objects", "config", loaded.String(), "objects", len(objs.All()))
	start := time.Now()
	for _, obj := range objs.All() {
		// The Service last, and replaced only now when its class changes: by then the new announcement's objects
		// exist, and the pool selects no other Service, so nothing can take the VIP in between.
		if obj == objs.Service {
			if err := a.replaceServiceOfOtherClass(ctx, log, objs.Service, objs.Pool.Name); err != nil {
				return nil, err
			}
		}
		if err := apply(ctx, a.client, obj); err != nil {
			return nil, fmt.Errorf("applying %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
		}
	}
	// From the informers: an object that they have not seen yet was applied by an earlier reconciliation a moment ago,
	// and is swept by the next one.
	if err := a.deleteOwned(ctx, exp, objs.All(), a.owned); err != nil {
		return nil, err
	}
	log.Info("Exposure objects applied, waiting for Cilium LB-IPAM to assign the VIP", "took", time.Since(start).String())
	start = time.Now()
	ingress, err := a.waitForIngress(ctx, objs.Service, objs.Pool.Name, loaded.Pool)
	if err != nil {
		return nil, err
	}
	log.Info("Cilium LB-IPAM assigned the VIP, waiting for Cilium to announce it", "ingress", ingress, "waited", time.Since(start).String())
	start = time.Now()
	announcers, err := a.waitForAnnouncement(ctx, objs)
	if err != nil {
		return nil, err
	}
	log.Info("Cilium announces the VIP", "announcement", cfg.Announcement, "nodes", announcers, "waited", time.Since(start).String())
	a.recorder.Eventf(exp, nil, corev1.EventTypeNormal, reasonAnnounced, "Announce", "VIP %s announced by %s (%s)", ingressIPs(ingress), strings.Join(announcers, ", "), cfg.Announcement)
	return ingress, nil
}

// replaceServiceOfOtherClass deletes the Service when the announcement changed: loadBalancerClass is immutable, so
// switching between L2 and BGP needs a new Service (and LB-IPAM assigns the VIP anew; pin it to keep it).
//
// The new Service has the old one's name, and LB-IPAM keys Services by name (operator/pkg/lbipam handleUpsertService,
// resource.NewKey): were the deletion and the creation coalesced into one event for that key, the new Service would
// inherit the old one's allocation. So it is created only once the exposure's pool, which selects no other Service,
// counts no address used. LB-IPAM runs in cilium-operator: while no operator leads, the switch waits here.
func (a *actuator) replaceServiceOfOtherClass(ctx context.Context, log logr.Logger, desired *corev1.Service, poolName string) error {
	current := &corev1.Service{}
	if err := a.reader.Get(ctx, client.ObjectKeyFromObject(desired), current); client.IgnoreNotFound(err) != nil {
		return err
	} else if err == nil {
		if equality.Semantic.DeepEqual(current.Spec.LoadBalancerClass, desired.Spec.LoadBalancerClass) {
			return nil
		}
		log.Info("Replacing the Service: the announcement changed its loadBalancerClass", "from", current.Spec.LoadBalancerClass, "to", *desired.Spec.LoadBalancerClass)
		if err := a.deleteService(ctx, desired.Namespace, desired.Name, true); err != nil {
			return err
		}
	}
	pool := &ciliumv2.CiliumLoadBalancerIPPool{}
	released, err := a.poll(ctx, func(ctx context.Context) (bool, error) {
		if err := a.reader.Get(ctx, client.ObjectKey{Name: poolName}, pool); err != nil {
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		}
		c := meta.FindStatusCondition(pool.Status.Conditions, conditionPoolIPsUsed)
		return c == nil || c.Message == "0", nil
	})
	if err != nil {
		return err
	}
	if !released {
		return &reconcilerutils.RequeueAfterError{RequeueAfter: time.Second, Cause: fmt.Errorf("waiting until Cilium LB-IPAM (in cilium-operator) has released the VIP of the replaced Service %s/%s: CiliumLoadBalancerIPPool %s counts addresses used", desired.Namespace, desired.Name, poolName)}
	}
	return nil
}

// waitForIngress returns the Service's ingress once LB-IPAM has assigned it from the exposure's pool, and fails early
// with Cilium's own explanation when it cannot: LB-IPAM disables the younger of two overlapping pools, and a pool of
// someone else's that selects every Service then hands out a VIP that the exposure's configuration never named.
func (a *actuator) waitForIngress(ctx context.Context, desired *corev1.Service, poolName string, configured addressing.Pool) ([]corev1.LoadBalancerIngress, error) {
	var (
		svc  = &corev1.Service{}
		pool = &ciliumv2.CiliumLoadBalancerIPPool{}
	)
	assigned, err := a.poll(ctx, func(ctx context.Context) (bool, error) {
		if err := a.client.Get(ctx, client.ObjectKeyFromObject(desired), svc); client.IgnoreNotFound(err) != nil {
			return false, err
		}
		// An ingress is confirmed without the cache: right after a replacement the informer may still hold the old
		// Service, with its ingress.
		if len(svc.Status.LoadBalancer.Ingress) > 0 {
			if err := a.reader.Get(ctx, client.ObjectKeyFromObject(desired), svc); err != nil {
				return false, client.IgnoreNotFound(err)
			}
		}
		if err := a.client.Get(ctx, client.ObjectKey{Name: poolName}, pool); client.IgnoreNotFound(err) != nil {
			return false, err
		}
		if c := meta.FindStatusCondition(pool.Status.Conditions, conditionPoolConflict); c != nil && c.Status == metav1.ConditionTrue {
			return false, fmt.Errorf("CiliumLoadBalancerIPPool %s is rejected by Cilium: it conflicts with another pool: %s", poolName, c.Message)
		}
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if ip, err := netip.ParseAddr(in.IP); err != nil || !configured.Contains(ip) {
				return false, fmt.Errorf("the VIP %s that Cilium assigned to Service %s/%s is not in the exposure's pool: another CiliumLoadBalancerIPPool selects the Service", in.IP, svc.Namespace, svc.Name)
			}
		}
		return len(svc.Status.LoadBalancer.Ingress) > 0, nil
	})
	if err != nil {
		return nil, err
	}
	if !assigned {
		return nil, &reconcilerutils.RequeueAfterError{RequeueAfter: 2 * time.Second, Cause: notAssigned(svc)}
	}
	return ingressOf(svc), nil
}

// poll calls cond every pollInterval until it is done or fails, for at most ingressWait. Running out of time, or a
// look cut off by the deadline, is not an error: the caller requeues.
func (a *actuator) poll(ctx context.Context, cond wait.ConditionWithContextFunc) (bool, error) {
	err := wait.PollUntilContextTimeout(ctx, a.pollInterval, a.ingressWait, true, cond)
	if wait.Interrupted(err) && ctx.Err() == nil {
		return false, nil
	}
	return err == nil, err
}

func notAssigned(svc *corev1.Service) error {
	msg := fmt.Sprintf("Cilium LB-IPAM has not assigned a VIP to Service %s/%s yet", svc.Namespace, svc.Name)
	if c := meta.FindStatusCondition(svc.Status.Conditions, conditionIPAMRequestSatisfied); c != nil && c.Status == metav1.ConditionFalse {
		msg += fmt.Sprintf(": %s: %s", c.Reason, c.Message)
	}
	return errors.New(msg)
}

// ingressOf copies what LB-IPAM wrote, IPs only: it sets neither hostnames nor ipMode.
func ingressOf(svc *corev1.Service) []corev1.LoadBalancerIngress {
	out := make([]corev1.LoadBalancerIngress, 0, len(svc.Status.LoadBalancer.Ingress))
	for _, in := range svc.Status.LoadBalancer.Ingress {
		out = append(out, corev1.LoadBalancerIngress{IP: in.IP, Hostname: in.Hostname})
	}
	return out
}

// Delete deletes the Service first and waits until it is gone, so that LB-IPAM has released the VIP before its pool
// goes; then everything else the exposure owns.
func (a *actuator) Delete(ctx context.Context, log logr.Logger, exp *extensionsv1alpha1.SelfHostedShootExposure, _ *extensionscontroller.Cluster) error {
	return a.delete(ctx, log, exp, true)
}

// ForceDelete deletes the same objects without waiting for the Service.
func (a *actuator) ForceDelete(ctx context.Context, log logr.Logger, exp *extensionsv1alpha1.SelfHostedShootExposure, _ *extensionscontroller.Cluster) error {
	return a.delete(ctx, log, exp, false)
}

func (a *actuator) delete(ctx context.Context, log logr.Logger, exp *extensionsv1alpha1.SelfHostedShootExposure, wait bool) error {
	a.health.Untrack(client.ObjectKeyFromObject(exp))
	if err := a.deleteService(ctx, exp.Namespace, resources.ServiceName(exp.Name), wait); err != nil {
		return err
	}
	log.Info("Service deleted, deleting the other exposure objects")
	// From kube-apiserver: after the exposure is gone, nothing sweeps what the informers had not seen yet.
	return a.deleteOwned(ctx, exp, nil, a.reader)
}

// deleteService deletes the exposure's Service and, with wait, waits until it is gone.
func (a *actuator) deleteService(ctx context.Context, namespace, name string, wait bool) error {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := a.client.Delete(ctx, svc); client.IgnoreNotFound(err) != nil {
		return err
	}
	if wait {
		gone, err := a.poll(ctx, func(ctx context.Context) (bool, error) {
			err := a.reader.Get(ctx, client.ObjectKeyFromObject(svc), &corev1.Service{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
		if err != nil {
			return err
		}
		if !gone {
			return &reconcilerutils.RequeueAfterError{RequeueAfter: time.Second, Cause: fmt.Errorf("waiting until Service %s/%s is gone and its VIP released", svc.Namespace, svc.Name)}
		}
	}
	return nil
}

// deleteOwned deletes the objects of every owned kind that carry the exposure's labels (this extension's managed-by
// label among them) and are not among keep.
func (a *actuator) deleteOwned(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, keep []client.Object, from lister) error {
	kept := sets.New[string]()
	for _, obj := range keep {
		kept.Insert(obj.GetObjectKind().GroupVersionKind().Kind + "/" + obj.GetName())
	}
	for _, kind := range resources.OwnedKinds {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(kind.GroupVersion().WithKind(kind.Kind + "List"))
		opts := []client.ListOption{client.MatchingLabels(resources.Labels(exp.Name, exp.Namespace))}
		if kind.Namespaced {
			opts = append(opts, client.InNamespace(exp.Namespace))
		}
		if err := from.List(ctx, list, opts...); err != nil {
			if meta.IsNoMatchError(err) {
				continue // that Cilium CRD is not installed, so nothing of that kind exists
			}
			return fmt.Errorf("listing %s: %w", kind.Kind, err)
		}
		for i := range list.Items {
			obj := &list.Items[i]
			if kept.Has(kind.Kind + "/" + obj.Name) {
				continue
			}
			obj.SetGroupVersionKind(kind.GroupVersionKind)
			if err := a.client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting %s %s: %w", kind.Kind, obj.Name, err)
			}
		}
	}
	return nil
}

// site is what the extension sees of the nodes' network: every Node's InternalIP and ExternalIP, and the gateways of
// its own node's default routes (it runs in the host network of a control-plane node). What cannot be read is left
// out of the validation, never made an error of the exposure.
func (a *actuator) site(ctx context.Context, log logr.Logger) config.Site {
	var site config.Site
	nodes := &corev1.NodeList{}
	if err := a.client.List(ctx, nodes); err != nil {
		log.Error(err, "Listing the Nodes for the validation of the exposure's addresses")
	}
	for _, n := range nodes.Items {
		for _, addr := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(addr.Address); err == nil && (addr.Type == corev1.NodeInternalIP || addr.Type == corev1.NodeExternalIP) {
				site.NodeAddresses = append(site.NodeAddresses, ip.Unmap())
			}
		}
	}
	gateways, err := network.DefaultGateways(a.procNet)
	if err != nil {
		log.Error(err, "Reading the node's default gateways for the validation of the exposure's addresses")
	}
	site.Gateways = gateways
	return site
}
