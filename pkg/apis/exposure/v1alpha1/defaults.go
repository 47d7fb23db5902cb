package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
