// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

func addDefaultingFuncs(scheme *runtime.Scheme) error {
	return RegisterDefaults(scheme)
}

// SetDefaults_ExposureConfig defaults the announcement to L2.
func SetDefaults_ExposureConfig(obj *ExposureConfig) {
	if obj.Announcement == "" {
		obj.Announcement = AnnouncementL2
	}
	if obj.Announcement == AnnouncementL2 && obj.L2 == nil {
		obj.L2 = &L2{}
	}
}

// SetDefaults_L2 sets lease timings that fail the VIP over within a few seconds: kube-vip's duration and renew deadline
// for the same job (5s/3s), and a retry period of 500ms, since the extension's handover (pkg/controller/l2handover)
// waits two retry periods for a renewal and the agent it hands the lease to acts within 2.2 retry periods. Cilium's own
// defaults (15s/5s/2s) leave kube-apiserver unreachable for up to 20s when the announcing node fails. Each agent then
// reads the lease twice a second (the holder writes it as often), far below Cilium's client rate limit (10 QPS).
func SetDefaults_L2(obj *L2) {
	if obj.LeaseDuration == nil {
		obj.LeaseDuration = &metav1.Duration{Duration: 5 * time.Second}
	}
	if obj.LeaseRenewDeadline == nil {
		obj.LeaseRenewDeadline = &metav1.Duration{Duration: 3 * time.Second}
	}
	if obj.LeaseRetryPeriod == nil {
		obj.LeaseRetryPeriod = &metav1.Duration{Duration: 500 * time.Millisecond}
	}
}

// Default BGP timers of a peer. The VIP is kube-apiserver's: a node that hangs or loses its link keeps its route, and
// a third of the connections through the VIP keep going to it, until the router's hold timer expires, so the hold time
// is 9 s rather than Cilium's 90 s; a keepalive every 3 s costs a packet per session. The connect retry of 1 s brings a
// session back a second after a router or agent restart rather than after Cilium's 120 s (GoBGP still idles 5 s after
// a reset).
const (
	defaultBGPHoldTimeSeconds         = 9
	defaultBGPConnectRetryTimeSeconds = 1
)

// SetDefaults_BGPPeer sets the timers of a peer, keeping hold time and keepalive interval at three to one when one of
// them is set.
func SetDefaults_BGPPeer(obj *BGPPeer) {
	switch {
	case obj.HoldTimeSeconds == nil && obj.KeepAliveTimeSeconds == nil:
		obj.HoldTimeSeconds = ptr.To[int32](defaultBGPHoldTimeSeconds)
		obj.KeepAliveTimeSeconds = ptr.To[int32](defaultBGPHoldTimeSeconds / 3)
	case obj.KeepAliveTimeSeconds == nil:
		obj.KeepAliveTimeSeconds = ptr.To(max(*obj.HoldTimeSeconds/3, 1))
	case obj.HoldTimeSeconds == nil:
		obj.HoldTimeSeconds = ptr.To(min(max(3**obj.KeepAliveTimeSeconds, 3), 65535))
	}
	if obj.ConnectRetryTimeSeconds == nil {
		obj.ConnectRetryTimeSeconds = ptr.To[int32](defaultBGPConnectRetryTimeSeconds)
	}
}
