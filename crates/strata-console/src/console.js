// Strata console: uploads with a progress bar (the only script; no library).
(function () {
  var form = document.getElementById("upload-form");
  if (!form) return;
  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var input = document.getElementById("file");
    var file = input.files && input.files[0];
    var status = document.getElementById("upload-status");
    var bar = document.getElementById("upload-progress");
    if (!file) { status.textContent = "Choose a file first."; return; }
    var key = form.dataset.prefix + file.name;
    var url = "/ui/buckets/" + encodeURIComponent(form.dataset.bucket) + "/upload?key=" + encodeURIComponent(key);
    var xhr = new XMLHttpRequest();
    xhr.open("PUT", url);
    xhr.setRequestHeader("x-csrf-token", form.dataset.csrf);
    xhr.setRequestHeader("content-type", file.type || "application/octet-stream");
    bar.hidden = false;
    bar.value = 0;
    status.textContent = "Uploading " + file.name + "…";
    xhr.upload.onprogress = function (e) {
      if (e.lengthComputable) {
        bar.value = Math.floor((e.loaded * 100) / e.total);
        status.textContent = "Uploading " + file.name + ": " + bar.value + "%";
      }
    };
    xhr.onload = function () {
      var answer = {};
      try { answer = JSON.parse(xhr.responseText); } catch (e) {}
      if (xhr.status === 200) {
        bar.value = 100;
        // The answer stays on the page, with a link to the new object.
        status.textContent = "Uploaded " + key + " (" + answer.size + " bytes): ";
        var link = document.createElement("a");
        link.href = "/ui/buckets/" + encodeURIComponent(form.dataset.bucket) + "/object?key=" + encodeURIComponent(key);
        link.textContent = file.name;
        status.appendChild(link);
        status.className = "ok";
      } else {
        status.textContent = "Upload refused (" + xhr.status + "): " + (answer.error || xhr.statusText);
        status.className = "error";
      }
    };
    xhr.onerror = function () { status.textContent = "The upload failed: the node did not answer."; status.className = "error"; };
    xhr.send(file);
  });
})();
