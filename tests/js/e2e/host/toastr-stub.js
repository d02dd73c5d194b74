// toastr's API as ST uses it (toastr.info/success/warning/error(message, title, options)); records each toast.
(function () {
    const toasts = [];
    function show(level) {
        return function (message, title, options) {
            options = options || {};
            // toastr's preventDuplicates: an identical toast that is still on screen is not shown again.
            if (options.preventDuplicates && toasts.some(t => t.level === level && t.message === String(message) && t.visible)) {
                toasts.push({ level, message: String(message), title: title || '', options, visible: false, suppressed: true, at: Date.now() });
                return null;
            }
            const toast = { level, message: String(message), title: title || '', options, visible: true, at: Date.now() };
            toasts.push(toast);
            const container = document.getElementById('toast-container');
            if (container) {
                const div = document.createElement('div');
                div.className = `toast toast-${level}`;
                div.textContent = (title ? title + ': ' : '') + String(message).replace(/<br>/g, '\n');
                container.append(div);
                setTimeout(() => { toast.visible = false; div.remove(); }, options.timeOut || 4000);
            }
            return toast;
        };
    }
    window.toastr = { info: show('info'), success: show('success'), warning: show('warning'), error: show('error'), clear() {}, toasts };
})();
