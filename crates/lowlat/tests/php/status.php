<?php
// Status and Location as applications send them.
switch ($_GET['case'] ?? '') {
    case 'teapot':
        header('Status: 418 Short And Stout');
        echo "teapot\n";
        break;
    case 'created':
        http_response_code(201);
        header('Location: /things/1');
        echo "created\n";
        break;
    case 'redirect':
        header('Location: https://example.com/elsewhere');
        break;
    case 'local':
        header('Location: /params.php?from=local');
        break;
    case 'nocontent':
        http_response_code(204);
        break;
    case 'length':
        header('Content-Length: 5');
        echo "12345";
        break;
    default:
        echo "plain\n";
}
